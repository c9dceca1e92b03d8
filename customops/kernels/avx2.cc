// AVX2 kernel (no VNNI). Compiled with -mavx2 -mfma -mf16c only; selected at run time by
// dispatch.cc.
//
// Weights: the 8-row panel layout of x86_common.h; dot() is x86_common.h's YmmDot (see
// avxvnni.cc). Products come from vpmaddubsw (u8 codes x s8 activations -> int16 pair sums,
// |pair| <= 2*2*128 = 512) added in int16 with vpaddw; every 32 quads (|sum| <= 16384, far from
// int16 overflow) vpmaddwd against ones widens them into int32. That is one multiply-port op per
// 32 products instead of two for vpmaddubsw + vpmaddwd every step. 3 tokens x 16 rows per
// microkernel: with 16 ymm registers, more tokens spill.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "i2s_kernel.h"
#include "x86_common.h"

namespace bitnet_onnx {
namespace {

using namespace x86;

struct Avx2Ops {
  static constexpr bool kInt32Steps = false;  // step accumulates in int32
  static constexpr int kMr = 3;
  static constexpr int64_t kChunkQuads = 32;
  static __m256i step(__m256i acc, __m256i codes, __m256i x) {
    return _mm256_add_epi16(_mm256_maddubs_epi16(codes, x), acc);
  }
  static __m256i widen(__m256i acc) { return _mm256_madd_epi16(acc, _mm256_set1_epi16(1)); }
};

using Dot = YmmDot<Avx2Ops>;

size_t packed_bytes(int64_t n, int64_t k) { return panel_bytes(n, k, Dot::G); }
void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) { repack_panels<Dot::G>(i2s, n, k, packed); }

const I2SKernel kAvx2 = {"avx2", packed_bytes, repack, quantize_ymm, Dot::dot,
                         /*tile_m=*/256, /*tile_n=*/256, Dot::dot_scaled};

}  // namespace

const I2SKernel* avx2_kernel() { return &kAvx2; }

}  // namespace bitnet_onnx
