// The x86 vector classes of the lookup kernels (lut_tables.h has the loops and what a class
// provides): Ymm16 (T = 16 tokens, AVX2) and Zmm32 (T = 32 tokens, AVX-512BW, compiled only where
// __AVX512BW__ is on). In an anonymous namespace, like the loops.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "lut_tables.h"

namespace bitnet_onnx {
namespace lut {
namespace {

struct Ymm16 {
  using I = __m256i;
  static constexpr int kTokens = 16;
  static I zero() { return _mm256_setzero_si256(); }
  static I load(const void* p) { return _mm256_load_si256(static_cast<const I*>(p)); }
  static void store(void* p, I v) { _mm256_store_si256(static_cast<I*>(p), v); }
  static I add16(I a, I b) { return _mm256_add_epi16(a, b); }
  static I sub16(I a, I b) { return _mm256_sub_epi16(a, b); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  template <int s> static I slli32(I a) { return _mm256_slli_epi32(a, s); }
  template <int s> static I srai32(I a) { return _mm256_srai_epi32(a, s); }
  static I odd_words(I even, I odd) { return _mm256_blend_epi16(even, odd, 0xAA); }
  // Dwords at base + lane * stride for lanes < count, 0 in the others.
  static I gather(const int8_t* base, int64_t stride, int count) {
    const I lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const I live = _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane);
    const I offs = _mm256_mullo_epi32(lane, _mm256_set1_epi32(static_cast<int>(stride)));
    return _mm256_mask_i32gather_epi32(zero(), reinterpret_cast<const int*>(base), offs, live, 1);
  }
  // v[r] lane c -> v[c] lane r (8 x 8 int32), for the epilogue's [row][token] -> [token][row].
  static void transpose32(I (&v)[8]) {
    I t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {
      u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
      u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
      u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
      u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int k = 0; k < 4; ++k) {  // u[4i + k] 128-bit lane L: rows 4i..4i+3 of column 4L + k
      v[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
      v[4 + k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
    }
  }
  static void storeu32(int32_t* p, I v) { _mm256_storeu_si256(reinterpret_cast<I*>(p), v); }
  static void store_scaled(float* y, I v, float a, float s_w) {
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_div_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(a)), _mm256_set1_ps(s_w)));
  }
};

#if defined(__AVX512BW__)
struct Zmm32 {
  using I = __m512i;
  static constexpr int kTokens = 32;
  static I zero() { return _mm512_setzero_si512(); }
  static I load(const void* p) { return _mm512_load_si512(p); }
  static void store(void* p, I v) { _mm512_store_si512(p, v); }
  static I add16(I a, I b) { return _mm512_add_epi16(a, b); }
  static I sub16(I a, I b) { return _mm512_sub_epi16(a, b); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  template <int s> static I slli32(I a) { return _mm512_slli_epi32(a, s); }
  template <int s> static I srai32(I a) { return _mm512_srai_epi32(a, s); }
  static I odd_words(I even, I odd) { return _mm512_mask_blend_epi16(0xAAAAAAAAu, even, odd); }
  static I gather(const int8_t* base, int64_t stride, int count) {
    const I offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                      _mm512_set1_epi32(static_cast<int>(stride)));
    const __mmask16 live = static_cast<__mmask16>(count >= 16 ? 0xFFFF : (1u << count) - 1);
    return _mm512_mask_i32gather_epi32(zero(), live, offs, base, 1);
  }
  // v[r] lane c -> v[c] lane r (16 x 16 int32).
  static void transpose32(I (&v)[16]) {
    I t[16], u[16];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
      u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
      u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
      u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
      u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int k = 0; k < 4; ++k) {  // u[4i + k] 128-bit lane L: rows 4i..4i+3 of column 4L + k
      const I s1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44), s2 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xEE);
      const I s3 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44), s4 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xEE);
      v[k] = _mm512_shuffle_i32x4(s1, s3, 0x88);
      v[4 + k] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
      v[8 + k] = _mm512_shuffle_i32x4(s2, s4, 0x88);
      v[12 + k] = _mm512_shuffle_i32x4(s2, s4, 0xDD);
    }
  }
  static void storeu32(int32_t* p, I v) { _mm512_storeu_si512(p, v); }
  static void store_scaled(float* y, I v, float a, float s_w) {
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_div_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(a)), _mm512_set1_ps(s_w)));
  }
};
#endif

}  // namespace
}  // namespace lut
}  // namespace bitnet_onnx
