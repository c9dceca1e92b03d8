// The family table's accessors (families.h) and the one thing the driver lends every family: the
// activations' quantizer of each ISA (family.h).
#include <cstring>
#include <string>

#include "cpu_features.h"
#include "families.h"
#include "isa.h"

namespace bitnet_onnx::i2s {

const KernelFamily& family_of(Family family) { return *kFamilies[family](); }

const char* family_name(Family family) { return family_of(family).name; }

const I2SKernel* family_kernel(Family family, Isa isa) { return isa_row(family_of(family).kernels, isa); }

// The base family serves every built ISA, so its kernels hold a quantizer for each (kernel_test
// checks the rows); the ISAs a build lacks never run.
QuantizeFn quantizer(Isa isa) {
  const I2SKernel* base = family_kernel(kBaseFamily, isa);
  return base ? base->quantize : family_kernel(kBaseFamily, kIsaScalar)->quantize;
}

const I2SKernel* kernel_named(const char* name, Isa* isa, Family* family, std::string* error) {
  // The base family's kernels carry their ISA's name: BITNET_ONNX_ISA's rule and errors.
  for (int i = 0; i < kIsaCount; ++i) {
    if (std::strcmp(isa_table()[i].name, name) != 0) continue;
    const I2SKernel* kernel = nullptr;
    if (const IsaRecord* record = select_isa(name, error)) {
      kernel = family_kernel(kBaseFamily, record->isa);
      *isa = record->isa;
      *family = kBaseFamily;
    }
    return kernel;
  }
  const CpuFeatures& cpu = cpu_features();
  bool exists = false;
  for (Family f = kBaseFamily + 1; f < kFamilyCount; ++f) {
    for (int i = 0; i < kIsaCount; ++i) {
      const IsaRecord& record = isa_table()[i];
      const I2SKernel* kernel = family_kernel(f, record.isa);
      if (!kernel || std::strcmp(kernel->name, name) != 0) continue;
      exists = true;
      if (record.built && record.available(cpu)) {
        *isa = record.isa;
        *family = f;
        return kernel;
      }
    }
  }
  if (error) *error = exists ? "no ISA this CPU runs has it" : "no kernel of that name in this build";
  return nullptr;
}

}  // namespace bitnet_onnx::i2s
