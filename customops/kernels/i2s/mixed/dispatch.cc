// The mixed family: its kernel for each record of the ISA table (isa.h). The driver measures it
// against the other families on the host (docs/op.md, "Kernel families"); it has no rules.
#include "cpu_features.h"
#include "family.h"
#include "mixed_kernels.h"

namespace bitnet_onnx::i2s::mixed {
namespace {

#if defined(__x86_64__) || defined(_M_X64)
// The avx512vnni row: the GFNI build of the kernel where the CPU has GFNI (the same name and output).
const I2SKernel* avx512vnni_kernel_for_this_cpu() {
  return cpu_features().avx512vnni_gfni ? avx512vnni_gfni_kernel() : avx512vnni_kernel();
}
#endif

// Only the zmm vpdpbusd ISA: the co-issue needs both a multiply unit and the lookups' loads to be
// busy at once, and a ymm build was not tried (the zmm one does not beat the lookup kernel on Zen 4;
// BENCHMARKS.md). amx CPUs have AVX512-VNNI, but their multiply kernel is the tile one: not tried.
const IsaRow<I2SKernel> kMixedKernels[] = {
    /*kIsaAmx=*/nullptr,
    /*kIsaAvx512Vnni=*/BITNET_ONNX_X86(avx512vnni_kernel_for_this_cpu),
    /*kIsaAvxVnni=*/nullptr,
    /*kIsaAvx2=*/nullptr,
    /*kIsaI8mm=*/nullptr,
    /*kIsaDotprod=*/nullptr,
    /*kIsaNeon=*/nullptr,
    /*kIsaScalar=*/scalar_kernel,
};

// No rules: only the measured choice runs it.
const KernelFamily kMixed = {"mixed", kMixedKernels, nullptr, 0};

}  // namespace

// Its row in the family table (families.h).
const KernelFamily* family() { return &kMixed; }

}  // namespace bitnet_onnx::i2s::mixed
