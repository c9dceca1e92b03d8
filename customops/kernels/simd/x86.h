// The x86 vector vocabulary of every kernel folder (the multiply and lookup families of kernels/i2s/,
// the attention tiles): one struct per width, Ymm (256-bit, AVX2 + FMA) and Zmm (512-bit, AVX-512), each
// with an int face (I, Mask: the int8 / int16 / int32 lane operations) and a float face (F, D,
// FMask: the _ps / _pd operations). Each struct, and each part of it that needs more than its
// width's base ISA, exists only where the translation unit's -m flags provide it (__AVX2__,
// __AVX512F__, __AVX512BW__, the VNNI macros, __GFNI__). Everything sits in an anonymous namespace: each ISA's
// file keeps its own copy, so no copy compiled with wider flags can stand in for a narrower file's.
// The math written once over either width (the epilogue, bf16 rounding, exp, the transpose) is
// simd/vector_math.h's, included below.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "vector_math.h"

namespace bitnet_onnx {
namespace simd {
namespace {

// The GF(2) matrix of vgf2p8affineqb (one per qword: bit i of a result byte is the parity of the source
// byte AND matrix byte 7 - i) that moves bits 2s and 2s + 1 of each byte to bits 0 and 1 and clears the rest.
constexpr long long crumb_matrix(int s) {
  return static_cast<long long>((uint64_t{1} << (2 * s)) << 56 | (uint64_t{1} << (2 * s + 1)) << 48);
}

#if defined(__AVX2__)
struct Ymm {
  using I = __m256i;
  using F = __m256;
  using D = __m256d;
  using Mask = __m256i;  // int32 lane mask as a vector: -1 in each selected lane
  using FMask = __m256;  // float compare result: all ones in each true lane
  static constexpr int kBytes = 32;
  static constexpr int kInt32Lanes = 8;
  static constexpr int kInt16Lanes = 16;
  static constexpr int kFloats = 8;
  static constexpr int kDoubles = 4;

  // ---- int face
  static I zero() { return _mm256_setzero_si256(); }
  static I load(const void* p) { return _mm256_load_si256(static_cast<const I*>(p)); }
  static I loadu(const void* p) { return _mm256_loadu_si256(static_cast<const I*>(p)); }
  static void store(void* p, I v) { _mm256_store_si256(static_cast<I*>(p), v); }
  static void storeu(void* p, I v) { _mm256_storeu_si256(static_cast<I*>(p), v); }
  static I bytes(int8_t b) { return _mm256_set1_epi8(b); }
  static I words(int16_t w) { return _mm256_set1_epi16(w); }
  static I dwords(int32_t v) { return _mm256_set1_epi32(v); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I add16(I a, I b) { return _mm256_add_epi16(a, b); }
  static I sub16(I a, I b) { return _mm256_sub_epi16(a, b); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I max_u32(I a, I b) { return _mm256_max_epu32(a, b); }
  static I srli16(I a, int s) { return _mm256_srli_epi16(a, s); }
#if defined(__GFNI__)
  // 2-bit field s of every byte in bits 0-1 (GFNI): one instruction for a shift and a mask
  template <int s> static I crumb(I a) {
    return _mm256_gf2p8affine_epi64_epi8(a, _mm256_set1_epi64x(crumb_matrix(s)), 0);
  }
#endif
  static I srli32(I a, int s) { return _mm256_srli_epi32(a, s); }
  template <int s> static I slli32(I a) { return _mm256_slli_epi32(a, s); }
  template <int s> static I srai32(I a) { return _mm256_srai_epi32(a, s); }
  // u8 x s8 products, adjacent pairs summed into int16 (vpmaddubsw, saturating)
  static I maddubs16(I u8, I s8) { return _mm256_maddubs_epi16(u8, s8); }
  // int16 products, adjacent pairs summed into int32 (vpmaddwd)
  static I madd16(I a, I b) { return _mm256_madd_epi16(a, b); }
#if defined(__AVXVNNI__)
  // acc += the four u8 x s8 products of each int32 lane (VEX vpdpbusd)
  static I dpbusd(I acc, I u8, I s8) { return _mm256_dpbusd_avx_epi32(acc, u8, s8); }
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
  // the same with the EVEX encoding (AVX512-VNNI CPUs without AVX-VNNI; the avxvnni test builds)
  static I dpbusd(I acc, I u8, I s8) { return _mm256_dpbusd_epi32(acc, u8, s8); }
#endif
  // sum += the bytes of q as int8, in int32 lanes (vpmaddubsw / vpmaddwd against ones)
  static I add_bytes(I sum, I q) { return add32(sum, madd16(maddubs16(bytes(1), q), words(1))); }
  // four vectors of int32 -> their values as saturated int8, in memory order
  static I pack_bytes(const I (&v)[4]) {
    const I b = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  }
  // odd words from `odd`, even ones from `even`
  static I odd_words(I even, I odd) { return _mm256_blend_epi16(even, odd, 0xAA); }
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
  // Dwords at base + lane * stride for lanes < count, 0 in the others.
  static I gather32(const int8_t* base, int64_t stride, int count) {
    const I lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const I live = _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane);
    const I offs = _mm256_mullo_epi32(lane, _mm256_set1_epi32(static_cast<int>(stride)));
    return _mm256_mask_i32gather_epi32(zero(), reinterpret_cast<const int*>(base), offs, live, 1);
  }
  // v[r] lane c -> v[c] lane r (8 x 8 int32)
  static void transpose32(I (&v)[8]) { transpose_dwords<Ymm>(v); }
  // transpose_dwords' steps (simd/vector_math.h)
  static I unpacklo32(I a, I b) { return _mm256_unpacklo_epi32(a, b); }
  static I unpackhi32(I a, I b) { return _mm256_unpackhi_epi32(a, b); }
  static I unpacklo64(I a, I b) { return _mm256_unpacklo_epi64(a, b); }
  static I unpackhi64(I a, I b) { return _mm256_unpackhi_epi64(a, b); }
  // u[4i + k], 128-bit lane L, holds rows 4i..4i+3 of column 4L + k -> v[c] = column c
  static void gather_lanes128(const I (&u)[8], I (&v)[8]) {
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
      v[4 + k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
    }
  }

  // int32 lane masks: output lanes [n0, n1) of group g (kInt32Lanes lanes a group)
  static Mask lane_mask(int64_t g, int64_t n0, int64_t n1) {
    const I col = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(g * kInt32Lanes)),
                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const I ge = _mm256_cmpgt_epi32(col, _mm256_set1_epi32(static_cast<int>(n0 - 1)));
    const I lt = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n1)), col);
    return _mm256_and_si256(ge, lt);
  }
  static Mask no_lanes() { return _mm256_setzero_si256(); }
  static bool all_lanes(Mask m) { return _mm256_movemask_epi8(m) == -1; }
  static Mask gt32(I a, I b) { return _mm256_cmpgt_epi32(a, b); }
  static Mask testn32(I a, I b) { return _mm256_cmpeq_epi32(_mm256_and_si256(a, b), _mm256_setzero_si256()); }
  // src with a | b in the lanes of m
  static I mask_or32(I src, Mask m, I a, I b) { return _mm256_blendv_epi8(src, _mm256_or_si256(a, b), m); }
  // src with a & b in the lanes of m
  static I mask_and32(I src, Mask m, I a, I b) { return _mm256_blendv_epi8(src, _mm256_and_si256(a, b), m); }
  static I maskload32(const int32_t* p, Mask m) { return _mm256_maskload_epi32(p, m); }
  static void maskstore32(int32_t* p, Mask m, I v) { _mm256_maskstore_epi32(p, m, v); }

  // ---- float face
  static F zero_ps() { return _mm256_setzero_ps(); }
  static F loadu_ps(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu_ps(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void maskstore_ps(float* p, Mask m, F v) { _mm256_maskstore_ps(p, m, v); }
  static void stream_ps(float* p, F v) { _mm256_stream_ps(p, v); }
  static F set1_ps(float v) { return _mm256_set1_ps(v); }
  static F add_ps(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub_ps(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul_ps(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div_ps(F a, F b) { return _mm256_div_ps(a, b); }
  static F max_ps(F a, F b) { return _mm256_max_ps(a, b); }
  static F min_ps(F a, F b) { return _mm256_min_ps(a, b); }
  static F fmadd_ps(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd_ps(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static F round_ps(F v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F cvt_ps(I v) { return _mm256_cvtepi32_ps(v); }
  static I cvt_round(F v) { return _mm256_cvtps_epi32(v); }  // MXCSR default: half to even
  static I cast_si(F v) { return _mm256_castps_si256(v); }
  static F cast_ps(I v) { return _mm256_castsi256_ps(v); }
  static I abs_bits(F v) { return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff)); }
  static FMask lt_ps(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static F zero_where(FMask m, F v) { return _mm256_andnot_ps(m, v); }
  // y * 2^n for integral n in [-126, 127], through the exponent bits
  static F mul_pow2(F y, F n) {
    const I e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  }
  static float hmax_ps(F x) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
  static float hsum_ps(F x) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
  // x already bf16-valued: its high halves
  static void store_bf16(uint16_t* p, F x) {
    alignas(32) uint32_t u[8];
    _mm256_store_si256(reinterpret_cast<I*>(u), _mm256_castps_si256(x));
    for (int i = 0; i < 8; ++i) p[i] = static_cast<uint16_t>(u[i] >> 16);
  }
  static D widen_pd(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }  // kDoubles floats
  static D mul_pd(D a, D b) { return _mm256_mul_pd(a, b); }
  static D fmadd_pd(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
  static void storeu_pd(double* p, D v) { _mm256_storeu_pd(p, v); }
};
#endif  // __AVX2__

#if defined(__AVX512F__)
struct Zmm {
  using I = __m512i;
  using F = __m512;
  using D = __m512d;
  using Mask = __mmask16;  // one bit per int32 lane
  using FMask = __mmask16;
  static constexpr int kBytes = 64;
  static constexpr int kInt32Lanes = 16;
  static constexpr int kInt16Lanes = 32;
  static constexpr int kFloats = 16;
  static constexpr int kDoubles = 8;

  // ---- int face (AVX512F)
  static I zero() { return _mm512_setzero_si512(); }
  static I load(const void* p) { return _mm512_load_si512(p); }
  static I loadu(const void* p) { return _mm512_loadu_si512(p); }
  static void store(void* p, I v) { _mm512_store_si512(p, v); }
  static void storeu(void* p, I v) { _mm512_storeu_si512(p, v); }
  static I bytes(int8_t b) { return _mm512_set1_epi8(b); }
  static I dwords(int32_t v) { return _mm512_set1_epi32(v); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I max_u32(I a, I b) { return _mm512_max_epu32(a, b); }
  static I srli32(I a, int s) { return _mm512_srli_epi32(a, s); }
  template <int s> static I slli32(I a) { return _mm512_slli_epi32(a, s); }
  // maskz form: GCC 12 warns about the undefined passthrough of the plain intrinsic
  template <int s> static I srai32(I a) { return _mm512_maskz_srai_epi32(0xFFFF, a, s); }
  static int32_t reduce_add32(I v) { return _mm512_reduce_add_epi32(v); }
  static uint32_t reduce_max_u32(I v) { return _mm512_reduce_max_epu32(v); }
  static I gather32(const int8_t* base, int64_t stride, int count) {
    const I offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                      _mm512_set1_epi32(static_cast<int>(stride)));
    const Mask live = static_cast<Mask>(count >= 16 ? 0xFFFF : (1u << count) - 1);
    return _mm512_mask_i32gather_epi32(zero(), live, offs, base, 1);
  }
  // v[r] lane c -> v[c] lane r (16 x 16 int32)
  static void transpose32(I (&v)[16]) { transpose_dwords<Zmm>(v); }
  static I unpacklo32(I a, I b) { return _mm512_unpacklo_epi32(a, b); }
  static I unpackhi32(I a, I b) { return _mm512_unpackhi_epi32(a, b); }
  static I unpacklo64(I a, I b) { return _mm512_unpacklo_epi64(a, b); }
  static I unpackhi64(I a, I b) { return _mm512_unpackhi_epi64(a, b); }
  static void gather_lanes128(const I (&u)[16], I (&v)[16]) {
    for (int k = 0; k < 4; ++k) {
      const I s1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44), s2 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xEE);
      const I s3 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44), s4 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xEE);
      v[k] = _mm512_shuffle_i32x4(s1, s3, 0x88);
      v[4 + k] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
      v[8 + k] = _mm512_shuffle_i32x4(s2, s4, 0x88);
      v[12 + k] = _mm512_shuffle_i32x4(s2, s4, 0xDD);
    }
  }

  static Mask lane_mask(int64_t g, int64_t n0, int64_t n1) {
    const int64_t lo = n0 - g * kInt32Lanes > 0 ? n0 - g * kInt32Lanes : 0;
    const int64_t hi = n1 - g * kInt32Lanes < kInt32Lanes ? n1 - g * kInt32Lanes : kInt32Lanes;
    return static_cast<Mask>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  }
  static Mask no_lanes() { return 0; }
  static bool all_lanes(Mask m) { return m == 0xFFFF; }
  static Mask gt32(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  static Mask testn32(I a, I b) { return _mm512_testn_epi32_mask(a, b); }
  static I mask_or32(I src, Mask m, I a, I b) { return _mm512_mask_or_epi32(src, m, a, b); }
  static I mask_and32(I src, Mask m, I a, I b) { return _mm512_mask_and_epi32(src, m, a, b); }
  static I maskload32(const int32_t* p, Mask m) { return _mm512_maskz_loadu_epi32(m, p); }
  static void maskstore32(int32_t* p, Mask m, I v) { _mm512_mask_storeu_epi32(p, m, v); }

#if defined(__AVX512BW__)
  // ---- int face, byte and word lanes (AVX512BW)
  static I add16(I a, I b) { return _mm512_add_epi16(a, b); }
  static I sub16(I a, I b) { return _mm512_sub_epi16(a, b); }
  static I srli16(I a, int s) { return _mm512_srli_epi16(a, s); }
  static I odd_words(I even, I odd) { return _mm512_mask_blend_epi16(0xAAAAAAAAu, even, odd); }
  static I pack_bytes(const I (&v)[4]) {
    const I b = _mm512_packs_epi16(_mm512_packs_epi32(v[0], v[1]), _mm512_packs_epi32(v[2], v[3]));
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), b);
  }
#endif
#if defined(__GFNI__)
  // 2-bit field s of every byte in bits 0-1 (GFNI): one instruction for a shift and a mask
  template <int s> static I crumb(I a) {
    return _mm512_gf2p8affine_epi64_epi8(a, _mm512_set1_epi64(crumb_matrix(s)), 0);
  }
#endif
#if defined(__AVX512VNNI__)
  static I dpbusd(I acc, I u8, I s8) { return _mm512_dpbusd_epi32(acc, u8, s8); }
  static I add_bytes(I sum, I q) { return dpbusd(sum, bytes(1), q); }
#endif

  // ---- float face
  static F zero_ps() { return _mm512_setzero_ps(); }
  static F loadu_ps(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu_ps(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void maskstore_ps(float* p, Mask m, F v) { _mm512_mask_storeu_ps(p, m, v); }
  static void stream_ps(float* p, F v) { _mm512_stream_ps(p, v); }
  static F set1_ps(float v) { return _mm512_set1_ps(v); }
  static F add_ps(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub_ps(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul_ps(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div_ps(F a, F b) { return _mm512_div_ps(a, b); }
  static F max_ps(F a, F b) { return _mm512_max_ps(a, b); }
  static F min_ps(F a, F b) { return _mm512_min_ps(a, b); }
  static F fmadd_ps(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd_ps(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F round_ps(F v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F cvt_ps(I v) { return _mm512_cvtepi32_ps(v); }
  static I cvt_round(F v) { return _mm512_cvtps_epi32(v); }
  static I cast_si(F v) { return _mm512_castps_si512(v); }
  static F cast_ps(I v) { return _mm512_castsi512_ps(v); }
  static I abs_bits(F v) { return _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)); }
  static FMask lt_ps(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static F zero_where(FMask m, F v) { return _mm512_maskz_mov_ps(static_cast<FMask>(~m), v); }
  static F mul_pow2(F y, F n) { return _mm512_scalef_ps(y, n); }
  static float hmax_ps(F x) { return _mm512_reduce_max_ps(x); }
  static float hsum_ps(F x) { return _mm512_reduce_add_ps(x); }
  // x already bf16-valued: its high halves (vpmovdw)
  static void store_bf16(uint16_t* p, F x) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_halves(x)); }
  static __m256i bf16_halves(F x) { return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16)); }
  static D widen_pd(const float* p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
  static D mul_pd(D a, D b) { return _mm512_mul_pd(a, b); }
  static D fmadd_pd(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
  static void storeu_pd(double* p, D v) { _mm512_storeu_pd(p, v); }
};
#endif  // __AVX512F__

}  // namespace
}  // namespace simd
}  // namespace bitnet_onnx
