// AVX2 + FMA tile ops (8 floats a vector; 6 x 2 register blocks of 16 ymm registers).
#include <immintrin.h>

#include "simd_tiles.h"

namespace bitnet_onnx {
namespace attention {
namespace {

struct V256 {
  using reg = __m256;
  static constexpr int width = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg x) { _mm256_storeu_ps(p, x); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static float hmax(reg x) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
  static float hsum(reg x) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
  // round_bf16 (attention.h) on 8 lanes in AVX2 integer ops.
  static reg round_bf16(reg x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i denormal = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                                     _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
    r = _mm256_blendv_epi8(r, _mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0x80000000u))), denormal);
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  // x already bf16-valued: its high halves (only the bf16 dot-product path stores these).
  static void store_bf16(uint16_t* p, reg x) {
    alignas(32) uint32_t u[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(u), _mm256_castps_si256(x));
    for (int i = 0; i < 8; ++i) p[i] = static_cast<uint16_t>(u[i] >> 16);
  }
  static reg exp(reg x) {
    const reg under = _mm256_cmp_ps(x, set1(kExpLo), _CMP_LT_OQ);  // and -inf
    x = _mm256_min_ps(_mm256_max_ps(x, set1(kExpLo)), set1(88.0f));
    const reg fx = _mm256_round_ps(mul(x, set1(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    reg r = _mm256_fnmadd_ps(fx, set1(kLn2Hi), x);
    r = _mm256_fnmadd_ps(fx, set1(kLn2Lo), r);
    const reg z = mul(r, r);
    reg y = set1(kExpP[0]);
    for (int i = 1; i < 6; ++i) y = fmadd(y, r, set1(kExpP[i]));
    y = fmadd(y, z, add(r, set1(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, mul(y, _mm256_castsi256_ps(e)));
  }
};

const TileOps kAvx2 = {"avx2", V256::width, scores<V256, 6, 2>, softmax<V256>, pv<V256, 6, 2>,
                        softmax_bf16<V256>};

}  // namespace

const TileOps* avx2_tile_ops() { return &kAvx2; }

}  // namespace attention
}  // namespace bitnet_onnx
