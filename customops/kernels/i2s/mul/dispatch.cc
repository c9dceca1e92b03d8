// The multiply family: its kernel for each record of the ISA table (isa.h), the base family of
// the table (families.h) that serves every ISA and shape.
#include "family.h"
#include "mul_kernels.h"

namespace bitnet_onnx::i2s::mul {
namespace {

// Each ISA's kernel table (its own file), null exactly where the record is not built (kernel_test
// checks it).
const IsaRow<I2SKernel> kMultiplyKernels[] = {
    /*kIsaAmx=*/BITNET_ONNX_X86(amx_kernel),
    /*kIsaAvx512Vnni=*/BITNET_ONNX_X86(avx512vnni_kernel),
    /*kIsaAvxVnni=*/BITNET_ONNX_X86(avxvnni_kernel),
    /*kIsaAvx2=*/BITNET_ONNX_X86(avx2_kernel),
    /*kIsaI8mm=*/BITNET_ONNX_ARM(neon_i8mm_kernel),
    /*kIsaDotprod=*/BITNET_ONNX_ARM(neon_dotprod_kernel),
    /*kIsaNeon=*/BITNET_ONNX_ARM(neon_kernel),
    /*kIsaScalar=*/scalar_kernel,
};

// No rules: the base family runs wherever no other family's rule makes it cheaper.
const KernelFamily kMultiply = {"mul", kMultiplyKernels, nullptr, 0};

}  // namespace

// Its row in the family table (families.h).
const KernelFamily* family() { return &kMultiply; }

}  // namespace bitnet_onnx::i2s::mul
