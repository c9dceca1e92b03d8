// mixed-avx512vnni: the co-issued kernel (mixed_kernels.h) over zmm: 32-token blocks (a last block of <= 16
// tokens in ymm), vpdpbusd on kMulRows of every kMulRows + kLutRows output rows and table lookups on the
// others. Two files compile it with the avx512vnni multiply kernels' flags: avx512vnni.cc as it is,
// avx512vnni_gfni.cc with -mgfni (the multiply rows' codes cut out by GFNI); dispatch.cc runs the second on a
// CPU with GFNI. The same name, layout and output bit for bit.
#pragma once

#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "mixed_tables.h"
#include "simd/x86.h"

// The split: of every 3 output rows, 1 on vpdpbusd and 2 on lookups (a third of the MACs on the
// multiply pipes; PATH 15 of benchmarks/register_peaks.c puts two thirds there, but this kernel's lookups
// cost fewer instructions per MAC than its vpdpbusd rows, which shift and mask their codes). Measured on
// Zen 4 (EPYC, 1 thread, 2026-12-06, loaded machine) with a scratch binary (not in the tree)
// instantiating MixedDot at (vpdpbusd rows, lookup rows) = 1:2, 1:1, 1:3, 2:3, 2:1, 2:2, 1:4, 1:0, 0:1
// next to the avx512vnni and lut-avx512 kernels, interleaved, best of 15, K x N x M = 1024x3072x512,
// 2048x640x512, 1024x1024x128, 3072x1024x128; time over avx512vnni's, range over the shapes and 3 runs:
// 1:2 0.71-0.86 (the fastest or tied at every shape and run), 2:3 0.72-0.87, 1:3 0.73-0.90, 1:1
// 0.75-0.94, 2:2 0.75-0.94, 1:4 0.74-0.93, 2:1 0.80-1.00, lookups only (0:1) 0.81-1.00, vpdpbusd only
// (1:0) 1.00-1.23; lut-avx512 0.78-1.00. The macros below exist only to measure (kernel_bench, one build
// per value).
#ifndef BITNET_MIXED_MUL_ROWS
#define BITNET_MIXED_MUL_ROWS 1
#endif
#ifndef BITNET_MIXED_LUT_ROWS
#define BITNET_MIXED_LUT_ROWS 2
#endif

namespace bitnet_onnx::i2s::mixed {
namespace {

constexpr int kMulRows = BITNET_MIXED_MUL_ROWS;
constexpr int kLutRows = BITNET_MIXED_LUT_ROWS;

template <bool kGfni>
constexpr I2SKernel kAvx512Vnni = mixed_kernel<MixedDot<simd::Zmm, kMulRows, kLutRows, kGfni>,
                                               MixedDot<simd::Ymm, kMulRows, kLutRows, kGfni>>("mixed-avx512vnni");

}  // namespace
}  // namespace bitnet_onnx::i2s::mixed
