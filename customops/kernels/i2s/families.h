// THE table of I2STernaryMatMul kernel families: one row per family folder under kernels/i2s/,
// in the order the driver tries them; the first (mul) is the base family that serves every ISA
// and shape. A row X(name) means: folder kernels/i2s/<name>/ (added to the build by
// kernels/i2s/CMakeLists.txt, which reads these rows) defines `const KernelFamily* family()` in its
// namespace bitnet_onnx::i2s::<name> (family.h). Adding a family is one folder and one row here
// (docs/contributing.md, "Add a kernel family"; tests/test_recipe_customops.py follows that recipe
// with a fake family).
#pragma once

#include <string>

#include "family.h"

// clang-format off
#define BITNET_ONNX_I2S_FAMILIES(X) \
  X(mul) \
  X(lut) \
  X(mul_direct) \
  X(mixed)
// clang-format on

namespace bitnet_onnx::i2s {

#define BITNET_ONNX_I2S_DECLARE_FAMILY(name) \
  namespace name {                           \
  const KernelFamily* family();              \
  }
BITNET_ONNX_I2S_FAMILIES(BITNET_ONNX_I2S_DECLARE_FAMILY)
#undef BITNET_ONNX_I2S_DECLARE_FAMILY

using FamilyRow = const KernelFamily* (*)();
#define BITNET_ONNX_I2S_FAMILY_ROW(name) name::family,
inline constexpr FamilyRow kFamilies[] = {BITNET_ONNX_I2S_FAMILIES(BITNET_ONNX_I2S_FAMILY_ROW)};
#undef BITNET_ONNX_I2S_FAMILY_ROW

// A family's index: its row in kFamilies (what Candidates and MatMul index by).
using Family = int;
constexpr Family kBaseFamily = 0;  // mul: every ISA, every shape
constexpr int kFamilyCount = static_cast<int>(sizeof(kFamilies) / sizeof(kFamilies[0]));

// The table's accessors (families.cc).

// The family of row `family` of the table.
const KernelFamily& family_of(Family family);

// The BITNET_ONNX_KERNEL values, one per family, in table order ("mul", "lut", "mul_direct", "mixed").
const char* family_name(Family family);

// `family`'s kernel for `isa` (its IsaRow), null where it has none.
const I2SKernel* family_kernel(Family family, Isa isa);

// The kernel called `name` of the ISA this CPU runs that is best (table order) among those whose
// row holds it, in any family; *isa and *family say where. Multiply kernels are named after their
// ISA and found through select_isa (its errors: "BITNET_ONNX_ISA=<name>: this CPU lacks ...").
// Null with *error set otherwise. For kernel_test and kernel_bench.
const I2SKernel* kernel_named(const char* name, Isa* isa, Family* family, std::string* error);

}  // namespace bitnet_onnx::i2s
