// AVX2 kernel (no VNNI): the 8-row panel layout, dot() from x86_dot.h's PanelDot, the quantizer
// from x86_common.h. Compiled with -mavx2 -mfma -mf16c only; selected at run time by dispatch.cc.
//
// Products come from vpmaddubsw (u8 codes x s8 activations -> int16 pair sums,
// |pair| <= 2*2*128 = 512) added in int16 with vpaddw; every 32 quads (|sum| <= 16384, far from
// int16 overflow) vpmaddwd against ones widens them into int32. That is one multiply-port op per
// 32 products instead of two for vpmaddubsw + vpmaddwd every step.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "mul_kernels.h"
#include "x86_common.h"
#include "x86_dot.h"

namespace bitnet_onnx {
namespace {

using namespace x86;

struct Avx2Ops {
  static constexpr bool kInt32Steps = false;
  static constexpr int64_t kChunkQuads = 32;
  static constexpr int kMr = 3;  // 3 tokens x 2 groups: int16 + int32 sums fill the 16 ymm registers
  static constexpr int kNg = 2;
  static constexpr int kDirectMr = 3, kDirectNg = 2, kSingleNg = 2;  // kSingleNg unused: int16 steps
  static constexpr int64_t kKc = 2048;  // 2 groups x 8 rows x 2 KB of unpacked codes = 32 KB of L1
  static constexpr int64_t kBufferedMinM = 8;
  static __m256i step(__m256i acc, __m256i codes, __m256i x) {
    return _mm256_add_epi16(_mm256_maddubs_epi16(codes, x), acc);
  }
  static __m256i widen(__m256i acc) { return _mm256_madd_epi16(acc, _mm256_set1_epi16(1)); }
};

using Dot = PanelDot<Ymm, Avx2Ops>;

const I2SKernel kAvx2 = {"avx2", Dot::packed_bytes, Dot::repack, quantize<Ymm>, Dot::dot,
                         /*tile_m=*/256, /*tile_n=*/256, Dot::dot_scaled, /*min_tile_n=*/64};

}  // namespace

const I2SKernel* avx2_kernel() { return &kAvx2; }

}  // namespace bitnet_onnx
