// The lookup family's row for each record of the ISA table (isa.h).
#include "i2s_kernel.h"
#include "isa.h"
#include "lut_kernel.h"

namespace bitnet_onnx {
namespace lut {
namespace {

#if defined(__x86_64__) || defined(_M_X64)
#define BITNET_LUT_X86(kernel) kernel
#else
#define BITNET_LUT_X86(kernel) nullptr
#endif
#if defined(__aarch64__)
#define BITNET_LUT_ARM(kernel) kernel
#else
#define BITNET_LUT_ARM(kernel) nullptr
#endif

// Indexed by Isa. AMX CPUs have AVX-512BW; AVX-VNNI CPUs have AVX2 (the lookups use neither
// VNNI nor AMX: only int16 adds), and every aarch64 ISA runs the one lut-neon.
const I2SKernel* (*const kLookupKernels[])() = {
    /*kIsaAmx=*/BITNET_LUT_X86(avx512_kernel),
    /*kIsaAvx512Vnni=*/BITNET_LUT_X86(avx512_kernel),
    /*kIsaAvxVnni=*/BITNET_LUT_X86(avx2_kernel),
    /*kIsaAvx2=*/BITNET_LUT_X86(avx2_kernel),
    /*kIsaI8mm=*/BITNET_LUT_ARM(neon_kernel),
    /*kIsaDotprod=*/BITNET_LUT_ARM(neon_kernel),
    /*kIsaNeon=*/BITNET_LUT_ARM(neon_kernel),
    /*kIsaScalar=*/scalar_kernel,
};
static_assert(sizeof(kLookupKernels) / sizeof(kLookupKernels[0]) == kIsaCount,
              "one lookup kernel row per record of the ISA table (isa.h)");

}  // namespace

const I2SKernel* lookup_kernel(Isa isa) {
  const auto kernel = kLookupKernels[isa];
  return kernel ? kernel() : nullptr;
}

}  // namespace lut
}  // namespace bitnet_onnx
