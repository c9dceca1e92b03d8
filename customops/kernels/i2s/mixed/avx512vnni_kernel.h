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
// cost fewer instructions per MAC than its vpdpbusd rows). Searched with `benchmarks/mixed_profile.py
// --splits` (customops/tests/mixed_profile.cc instantiates this source at every split of its kSplits, from
// 1:0 to 0:1, checked bit for bit against the library and timed interleaved): on Zen 4 with the GFNI build
// (2026-12-07, BENCHMARKS.md "The co-issued kernel's split, searched again with GFNI") 1:2 was the fastest in
// 5 of 6 (model, M) rows (M = 128-2048; the sixth within the run-to-run spread), the runner-up 1.035-1.12x its
// time, lookups alone (0:1) 1.07-1.20x, vpdpbusd alone (1:0) 1.5-1.8x.

namespace bitnet_onnx::i2s::mixed {
namespace {

constexpr int kMulRows = 1;
constexpr int kLutRows = 2;

template <bool kGfni>
constexpr I2SKernel kAvx512Vnni = mixed_kernel<MixedDot<simd::Zmm, kMulRows, kLutRows, kGfni>,
                                               MixedDot<simd::Ymm, kMulRows, kLutRows, kGfni>>("mixed-avx512vnni");

}  // namespace
}  // namespace bitnet_onnx::i2s::mixed
