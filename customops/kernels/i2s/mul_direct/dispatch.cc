// The mul_direct family: its kernel for each record of the ISA table (isa.h). The driver measures it
// against the multiply family on the host (docs/op.md, "Kernel families"); it has no rules.
#include "family.h"
#include "mul_direct_kernels.h"

namespace bitnet_onnx::i2s::mul_direct {
namespace {

// The x86 ISAs whose multiply kernel is a PanelDot (kernels/i2s_panel/x86_dot.h) with a buffered path.
// amx has its own tile kernel, and the NEON kernels their own; there this family has none.
const IsaRow<I2SKernel> kDirectKernels[] = {
    /*kIsaAmx=*/nullptr,
    /*kIsaAvx512Vnni=*/BITNET_ONNX_X86(avx512vnni_kernel),
    /*kIsaAvxVnni=*/BITNET_ONNX_X86(avxvnni_kernel),
    /*kIsaAvx2=*/BITNET_ONNX_X86(avx2_kernel),
    /*kIsaI8mm=*/nullptr,
    /*kIsaDotprod=*/nullptr,
    /*kIsaNeon=*/nullptr,
    /*kIsaScalar=*/scalar_kernel,
};

// No rules: which path wins at 16-128 tokens was measured to differ by CPU (direct on Zen 4; Intel cores
// with two zmm FMA ports may favour the buffered path), so only the measured choice runs it.
const KernelFamily kMulDirect = {"mul_direct", kDirectKernels, nullptr, 0};

}  // namespace

// Its row in the family table (families.h).
const KernelFamily* family() { return &kMulDirect; }

}  // namespace bitnet_onnx::i2s::mul_direct
