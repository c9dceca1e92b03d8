// The AVX2 lookup kernel: 16-token ymm tables (2.6 KB per group), 16 groups per K block (41 KB of
// tables: the 48 KB L1 class; lut_kernels.h). Compiled with -mavx2 -mfma -mf16c only.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "lut_x86.h"

namespace bitnet_onnx {
namespace lut {
namespace {

#ifndef BITNET_LUT_AVX2_BLOCK_GROUPS
#define BITNET_LUT_AVX2_BLOCK_GROUPS 16
#endif
using Kernel = LutKernel<BITNET_LUT_AVX2_BLOCK_GROUPS, Ymm16, Ymm16>;

const I2SKernel kAvx2 = {"lut-avx2", Kernel::packed_size, Kernel::repack_groups, /*quantize=*/nullptr, Kernel::dot,
                         /*tile_m=*/16, /*tile_n=*/4096, Kernel::dot_scaled, /*min_tile_n=*/512};

}  // namespace

const I2SKernel* avx2_kernel() { return &kAvx2; }

}  // namespace lut
}  // namespace bitnet_onnx
