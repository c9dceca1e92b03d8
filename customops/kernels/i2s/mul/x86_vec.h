// The two vector widths of the x86 kernels as one interface, so that the quantizer
// (x86_common.h) and the dot template (x86_dot.h) are written once: Ymm (256-bit, AVX2) and Zmm
// (512-bit, AVX-512). Each is compiled only into the files whose -m flags provide it; like
// x86_common.h, everything sits in an anonymous namespace so each ISA's translation unit keeps
// its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace bitnet_onnx {
namespace x86 {
namespace {

#if defined(__AVX2__)
struct Ymm {
  using I = __m256i;
  using F = __m256;
  using D = __m256d;
  using Mask = __m256i;  // lane mask as a vector: -1 in each selected int32 lane
  static constexpr int64_t kBytes = 32;
  static constexpr int64_t G = 8;  // int32 lanes = rows per panel group
  static constexpr int kDoubles = 4;

  // integers
  static I zero() { return _mm256_setzero_si256(); }
  static I load(const void* p) { return _mm256_load_si256(static_cast<const I*>(p)); }
  static I loadu(const void* p) { return _mm256_loadu_si256(static_cast<const I*>(p)); }
  static void store(void* p, I v) { _mm256_store_si256(static_cast<I*>(p), v); }
  static void storeu(void* p, I v) { _mm256_storeu_si256(static_cast<I*>(p), v); }
  static I bytes(int8_t b) { return _mm256_set1_epi8(b); }
  static I dwords(int32_t v) { return _mm256_set1_epi32(v); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I srli16(I a, int s) { return _mm256_srli_epi16(a, s); }
  static I srai32(I a, int s) { return _mm256_srai_epi32(a, s); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
  static int32_t reduce_add32(I v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
  }
  static uint32_t reduce_max_u32(I v) {
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
    return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
  }
  static I max_u32(I a, I b) { return _mm256_max_epu32(a, b); }
  // sum += the bytes of q as int8, in int32 lanes (vpmaddubsw / vpmaddwd against ones)
  static I add_bytes(I sum, I q) {
    return _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1)));
  }
  // four vectors of int32 -> their values as saturated int8, in memory order
  static I pack_bytes(const I (&v)[4]) {
    const I b = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  }

  // floats and doubles
  static F loadu_ps(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu_ps(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F set1_ps(float v) { return _mm256_set1_ps(v); }
  static F mul_ps(F a, F b) { return _mm256_mul_ps(a, b); }
  static I cvt_round(F v) { return _mm256_cvtps_epi32(v); }  // MXCSR default: half to even
  static I abs_bits(F v) { return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff)); }
  static D widen_pd(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }  // kDoubles floats
  static D mul_pd(D a, D b) { return _mm256_mul_pd(a, b); }
  static D fmadd_pd(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
  static void store_pd(double* p, D v) { _mm256_storeu_pd(p, v); }

  // output lanes [n0, n1) of group g
  static Mask lane_mask(int64_t g, int64_t n0, int64_t n1) {
    const I col = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(g * G)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const I ge = _mm256_cmpgt_epi32(col, _mm256_set1_epi32(static_cast<int>(n0 - 1)));
    const I lt = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n1)), col);
    return _mm256_and_si256(ge, lt);
  }
  static Mask no_lanes() { return _mm256_setzero_si256(); }
  static bool all_lanes(Mask m) { return _mm256_movemask_epi8(m) == -1; }
  static I maskload32(const int32_t* p, Mask m) { return _mm256_maskload_epi32(p, m); }
  static void maskstore32(int32_t* p, Mask m, I v) { _mm256_maskstore_epi32(p, m, v); }
  static void maskstore_ps(float* p, Mask m, F v) { _mm256_maskstore_ps(p, m, v); }
  static void stream_ps(float* p, F v) { _mm256_stream_ps(p, v); }
  // the op's epilogue, y = (float(sum) / a) * s_w, in that order (docs/op.md)
  static F scale(I sums, float a, float s_w) {
    return _mm256_mul_ps(_mm256_div_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(a)), _mm256_set1_ps(s_w));
  }
};
#endif  // __AVX2__

#if defined(__AVX512F__)
struct Zmm {
  using I = __m512i;
  using F = __m512;
  using D = __m512d;
  using Mask = __mmask16;
  static constexpr int64_t kBytes = 64;
  static constexpr int64_t G = 16;
  static constexpr int kDoubles = 8;

  static I zero() { return _mm512_setzero_si512(); }
  static I load(const void* p) { return _mm512_load_si512(p); }
  static I loadu(const void* p) { return _mm512_loadu_si512(p); }
  static void store(void* p, I v) { _mm512_store_si512(p, v); }
  static void storeu(void* p, I v) { _mm512_storeu_si512(p, v); }
  static I bytes(int8_t b) { return _mm512_set1_epi8(b); }
  static I dwords(int32_t v) { return _mm512_set1_epi32(v); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I srli16(I a, int s) { return _mm512_srli_epi16(a, s); }
  // maskz form: GCC 12 warns about the undefined passthrough of the plain intrinsic
  static I srai32(I a, int s) { return _mm512_maskz_srai_epi32(0xFFFF, a, s); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
  static int32_t reduce_add32(I v) { return _mm512_reduce_add_epi32(v); }
  static uint32_t reduce_max_u32(I v) { return _mm512_reduce_max_epu32(v); }
  static I max_u32(I a, I b) { return _mm512_max_epu32(a, b); }
  static I add_bytes(I sum, I q) { return _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), q); }
  static I pack_bytes(const I (&v)[4]) {
    const I b = _mm512_packs_epi16(_mm512_packs_epi32(v[0], v[1]), _mm512_packs_epi32(v[2], v[3]));
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), b);
  }

  static F loadu_ps(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu_ps(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F set1_ps(float v) { return _mm512_set1_ps(v); }
  static F mul_ps(F a, F b) { return _mm512_mul_ps(a, b); }
  static I cvt_round(F v) { return _mm512_cvtps_epi32(v); }
  static I abs_bits(F v) { return _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)); }
  static D widen_pd(const float* p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
  static D mul_pd(D a, D b) { return _mm512_mul_pd(a, b); }
  static D fmadd_pd(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
  static void store_pd(double* p, D v) { _mm512_storeu_pd(p, v); }

  static Mask lane_mask(int64_t g, int64_t n0, int64_t n1) {
    const int64_t lo = n0 - g * G > 0 ? n0 - g * G : 0, hi = n1 - g * G < G ? n1 - g * G : G;
    return static_cast<Mask>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  }
  static Mask no_lanes() { return 0; }
  static bool all_lanes(Mask m) { return m == 0xFFFF; }
  static I maskload32(const int32_t* p, Mask m) { return _mm512_maskz_loadu_epi32(m, p); }
  static void maskstore32(int32_t* p, Mask m, I v) { _mm512_mask_storeu_epi32(p, m, v); }
  static void maskstore_ps(float* p, Mask m, F v) { _mm512_mask_storeu_ps(p, m, v); }
  static void stream_ps(float* p, F v) { _mm512_stream_ps(p, v); }
  static F scale(I sums, float a, float s_w) {
    return _mm512_mul_ps(_mm512_div_ps(_mm512_cvtepi32_ps(sums), _mm512_set1_ps(a)), _mm512_set1_ps(s_w));
  }
};
#endif  // __AVX512F__

}  // namespace
}  // namespace x86
}  // namespace bitnet_onnx
