// The AVX2 lookup kernel: 16-token ymm tables (2.6 KB per group), 16 groups per K block (41 KB of
// tables: the 48 KB L1 class; lut_kernels.h). Compiled with -mavx2 -mfma -mf16c only.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "lut_tables.h"
#include "simd/x86.h"

#ifndef BITNET_LUT_AVX2_BLOCK_GROUPS
#define BITNET_LUT_AVX2_BLOCK_GROUPS 16
#endif

namespace bitnet_onnx::i2s::lut {
namespace {

constexpr I2SKernel kAvx2 = LutKernel<BITNET_LUT_AVX2_BLOCK_GROUPS, simd::Ymm, simd::Ymm>::table("lut-avx2");

}  // namespace

const I2SKernel* avx2_kernel() { return &kAvx2; }

}  // namespace bitnet_onnx::i2s::lut
