// The lookup family: its kernel for each record of the ISA table (isa.h) and when the driver runs it.
#include "family.h"
#include "lut_kernels.h"

namespace bitnet_onnx::i2s::lut {
namespace {

// AMX CPUs have AVX-512BW; AVX-VNNI CPUs have AVX2 (the lookups use neither VNNI nor AMX: only
// int16 adds), and every aarch64 ISA runs the one lut-neon.
const IsaRow<I2SKernel> kLookupKernels[] = {
    /*kIsaAmx=*/BITNET_ONNX_X86(avx512_kernel),
    /*kIsaAvx512Vnni=*/BITNET_ONNX_X86(avx512_kernel),
    /*kIsaAvxVnni=*/BITNET_ONNX_X86(avx2_kernel),
    /*kIsaAvx2=*/BITNET_ONNX_X86(avx2_kernel),
    /*kIsaI8mm=*/BITNET_ONNX_ARM(neon_kernel),
    /*kIsaDotprod=*/BITNET_ONNX_ARM(neon_kernel),
    /*kIsaNeon=*/BITNET_ONNX_ARM(neon_kernel),
    /*kIsaScalar=*/scalar_kernel,
};

// Measured with kernel_bench on one thread (docs/op.md, "Kernel families", has the numbers); the
// lookup kernels work in blocks of 16 tokens (a table per block), and few rows leave few lookups
// per table: a costlier block.
const FamilyRule kRules[] = {
    // AMD Zen 5, BITNET_ONNX_ISA=avx2: lut-avx2 took 0.61-0.78 of avx2's time at N >= 640 (K 640-3072,
    // M 16-512) and 0.83-0.89 at N = 256.
    {kIsaAvx2, 512, 16, 80},
    {kIsaAvx2, 256, 16, 90},
    // avxvnni: no rule until measured on an AVX-VNNI CPU (through its EVEX build on Zen 5, lut-avx2
    // took 0.77-0.96 of its time at N >= 640 but 1.04-1.27 at some shapes). avx512vnni, amx: no
    // rule: on Zen 5 the zmm vpdpbusd kernel runs 750-930 GOP/s, lut-avx512 450-660 (its lookup
    // loop peaks at ~980 GOP/s, as vpdpbusd zmm does): multiply wins at every shape.
};

const KernelFamily kLookup = {"lut", kLookupKernels, kRules, sizeof(kRules) / sizeof(kRules[0])};

}  // namespace

// Its row in the family table (families.h).
const KernelFamily* family() { return &kLookup; }

}  // namespace bitnet_onnx::i2s::lut
