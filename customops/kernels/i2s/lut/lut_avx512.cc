// The AVX-512BW lookup kernel: 32-token zmm tables (5.2 KB per group), 8 groups per K block (41 KB
// of tables: the 48 KB L1 class; lut_kernels.h); a last block of <= 16 tokens runs in ymm tables.
// Compiled with -mavx512f -mavx512bw -mavx512vl (+ AVX2/FMA/F16C of its quantizer's ISA).
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "lut_tables.h"
#include "simd/x86.h"

#ifndef BITNET_LUT_AVX512_BLOCK_GROUPS
#define BITNET_LUT_AVX512_BLOCK_GROUPS 8
#endif

namespace bitnet_onnx::i2s::lut {
namespace {

constexpr I2SKernel kAvx512 = LutKernel<BITNET_LUT_AVX512_BLOCK_GROUPS, simd::Zmm, simd::Ymm>::table("lut-avx512");

}  // namespace

const I2SKernel* avx512_kernel() { return &kAvx512; }

}  // namespace bitnet_onnx::i2s::lut
