// The I2S multiply kernels' row for each record of the ISA table (isa.h), and select_kernel.
#include <string>

#include "i2s_kernel.h"
#include "isa.h"

namespace bitnet_onnx {
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

}  // namespace

const I2SKernel* multiply_kernel(Isa isa) { return isa_row(kMultiplyKernels, isa); }

const I2SKernel* select_kernel(const char* forced, std::string* error) {
  return select_isa_row(kMultiplyKernels, forced, error);
}

}  // namespace bitnet_onnx
