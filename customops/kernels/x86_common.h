// Pieces shared by the x86 kernels (avx2.cc, avxvnni.cc, avx512vnni.cc): the repacked weight
// layout and plain-C++ helpers. Everything sits in an anonymous namespace so that each ISA's
// translation unit, compiled with its own -m flags, keeps a private copy (no ODR merging of an
// AVX-512 build of a helper into the AVX2 path).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "i2s_kernel.h"
#include "pairwise_sum.h"

namespace bitnet_onnx {
namespace x86 {
namespace {

constexpr int64_t kI2sBlock = 128;      // values per I2_S block
constexpr int64_t kI2sBlockBytes = 32;  // bytes per I2_S block
constexpr int64_t kSpan = 16;           // columns covered by one packed 4G-byte vector

// The "panel" layout every x86 kernel uses. Rows are grouped by G (16 for zmm, 8 for ymm); a
// group stores, for each span of 16 columns, 4G bytes where byte 4r+j holds in bits 2s..2s+1 the
// code of row G*g+r at column 16*span+4s+j. One vector load thus yields, after a shift by 2s and a
// mask, the vpdpbusd operand "G rows x 4 consecutive k" for quad s. Code 0b11 is stored as 0b01
// (reads as 0); padding rows are 0b01 too, so they contribute nothing.
inline int64_t panel_groups(int64_t n, int64_t g) { return (n + g - 1) / g; }
inline int64_t group_stride(int64_t k, int64_t g) { return g * k / 4; }  // bytes per group

inline size_t panel_bytes(int64_t n, int64_t k, int64_t g) {
  return static_cast<size_t>(panel_groups(n, g)) * static_cast<size_t>(group_stride(k, g));
}

// Code of column c in one row of I2_S bytes; 0b11 (never written) reads as 0 (code 0b01).
inline uint8_t i2s_code(const uint8_t* row, int64_t c) {
  const int64_t within = c % kI2sBlock;
  const uint8_t byte = row[(c / kI2sBlock) * kI2sBlockBytes + within % kI2sBlockBytes];
  const uint8_t code = (byte >> (6 - 2 * (within / kI2sBlockBytes))) & 3;
  return code == 3 ? 1 : code;
}

template <int64_t G>
void repack_panels(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) {
  const int64_t spans = k / kSpan;
  for (int64_t g = 0; g < panel_groups(n, G); ++g) {
    uint8_t* dst_group = packed + g * group_stride(k, G);
    for (int64_t r = 0; r < G; ++r) {
      const int64_t row = g * G + r;
      const uint8_t* src = i2s + row * (k / 4);
      for (int64_t sp = 0; sp < spans; ++sp) {
        uint8_t* dst = dst_group + sp * 4 * G + 4 * r;
        for (int j = 0; j < 4; ++j) {
          uint8_t byte = 0;
          #pragma GCC unroll 16
          for (int s = 0; s < 4; ++s) {
            const uint8_t code = row < n ? i2s_code(src, sp * kSpan + 4 * s + j) : 1;
            byte |= static_cast<uint8_t>(code << (2 * s));
          }
          dst[j] = byte;
        }
      }
    }
  }
}

inline int32_t load_quad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The leaves of sum_squares_reference (pairwise_sum.h: numpy's order, so inv_rms is bit-identical
// to the numpy reference on every path) as the vector code finds them: a piece of n values is
// one leaf (n <= 128), two equal leaves (n <= 256, n % 16 == 0) or four (n <= 512,
// n % 32 == 0), computed side by side; anything else splits like numpy. Leaf(x, n, sums) fills
// sums[0..NL) for NL leaves of n / NL values each.
template <class Leaves>
inline double pairwise_sum_squares(const float* x, int64_t n) {
  double s[4];
  if (n <= 128) {
    Leaves::template run<1>(x, n, s);
    return s[0];
  }
  if (n <= 256 && n % 16 == 0) {
    Leaves::template run<2>(x, n / 2, s);
    return s[0] + s[1];
  }
  if (n <= 512 && n % 32 == 0) {
    Leaves::template run<4>(x, n / 4, s);
    return (s[0] + s[1]) + (s[2] + s[3]);
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum_squares<Leaves>(x, n2) + pairwise_sum_squares<Leaves>(x + n2, n - n2);
}

// Per-thread float row scratch (grown once): the fused RMSNorm's output, so quantization's
// second pass reads it instead of normalizing again.
inline float* row_buffer(int64_t k) {
  thread_local std::vector<float> row;
  if (static_cast<int64_t>(row.size()) < k) row.resize(static_cast<size_t>(k));
  return row.data();
}


#if defined(__AVX512F__)
// ---------------------------------------------------------------------------------------------
// 512-bit quantization shared by avx512vnni.cc and amx.cc (numerics of scalar.cc, vectorized).

// NL numpy leaves of n values (n % 8 == 0) side by side, one zmm of partial sums r[0..7] each.
struct LeavesZmm {
  template <int NL>
  static void run(const float* x, int64_t n, double* sums) {
    __m512d r[NL];
    for (int l = 0; l < NL; ++l) {
      const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + l * n));
      r[l] = _mm512_mul_pd(v, v);
    }
    for (int64_t i = 8; i < n; i += 8)
      for (int l = 0; l < NL; ++l) {
        const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + l * n + i));
        r[l] = _mm512_fmadd_pd(v, v, r[l]);
      }
    for (int l = 0; l < NL; ++l) {
      alignas(64) double lane[8];
      _mm512_store_pd(lane, r[l]);
      sums[l] = combine8(lane);
    }
  }
};

inline double sum_squares_zmm(const float* x, int64_t k) { return pairwise_sum_squares<LeavesZmm>(x, k); }

template <bool kNorm>
inline __m512 normed_zmm(const float* x, const float* w, __m512 inv_rms, int64_t i) {
  const __m512 v = _mm512_loadu_ps(x + i);
  return kNorm ? _mm512_mul_ps(_mm512_mul_ps(v, inv_rms), _mm512_loadu_ps(w + i)) : v;
}

template <bool kNorm>
void quantize_row_zmm(const float* x, int64_t k, const float* w, float inv_rms, int8_t* q, float* a,
                  int32_t* qsum) {
  const __m512 inv = _mm512_set1_ps(inv_rms);
  // |v| as uint32 bits: their max is the bits of max|v| for finite values (the order of
  // non-negative floats), and >= the bits of +Inf (0x7f800000) iff some value is Inf or NaN.
  const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
  __m512i vmax = _mm512_setzero_si512();
  float* normed_row = kNorm ? row_buffer(k) : nullptr;  // the normed row, read again below
  for (int64_t i = 0; i < k; i += 16) {
    const __m512 v = normed_zmm<kNorm>(x, w, inv, i);
    if (kNorm) _mm512_storeu_ps(normed_row + i, v);
    vmax = _mm512_max_epu32(vmax, _mm512_and_si512(_mm512_castps_si512(v), absmask));
  }
  if (kNorm) x = normed_row;
  const uint32_t max_bits = _mm512_reduce_max_epu32(vmax);
  if (max_bits >= 0x7f800000u) {
    std::memset(q, 0, static_cast<size_t>(k));
    *a = std::nanf("");
    *qsum = 0;
    return;
  }
  float absmax;
  std::memcpy(&absmax, &max_bits, 4);
  const float scale = 127.0f / std::max(absmax, 1e-5f);
  const __m512 vs = _mm512_set1_ps(scale);
  // 64 values per step: saturating packs (== the clamp to [-128, 127]) then a dword permute
  // back to memory order; qsum accumulates with vpdpbusd against ones.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i sum = _mm512_setzero_si512();
  for (int64_t i = 0; i < k; i += 64) {
    // cvtps rounds half to even (MXCSR default), like nearbyint in scalar.cc.
    __m512i qi[4];
    for (int j = 0; j < 4; ++j) qi[j] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i + 16 * j), vs));
    const __m512i b = _mm512_packs_epi16(_mm512_packs_epi32(qi[0], qi[1]), _mm512_packs_epi32(qi[2], qi[3]));
    const __m512i qb = _mm512_permutexvar_epi32(order, b);
    _mm512_storeu_si512(q + i, qb);
    sum = _mm512_dpbusd_epi32(sum, ones, qb);
  }
  *a = scale;
  *qsum = _mm512_reduce_add_epi32(sum);
}

inline void quantize_zmm(const float* x, int64_t m, int64_t k, const float* norm_w, float eps, int8_t* q,
              float* a, int32_t* qsum) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    if (norm_w) {
      const double ss = sum_squares_zmm(xr, k);
      const float inv_rms = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(k) + static_cast<double>(eps)));
      quantize_row_zmm<true>(xr, k, norm_w, inv_rms, q + r * k, a + r, qsum + r);
    } else {
      quantize_row_zmm<false>(xr, k, nullptr, 1.0f, q + r * k, a + r, qsum + r);
    }
  }
}

#endif  // __AVX512F__

#if defined(__AVX2__)
// ---------------------------------------------------------------------------------------------
// 256-bit pieces shared by avx2.cc and avxvnni.cc (also compiled, unused, into avx512vnni.cc).

// NL numpy leaves of n values (n % 8 == 0) side by side, two ymm of partial sums each.
struct LeavesYmm {
  template <int NL>
  static void run(const float* x, int64_t n, double* sums) {
    __m256d lo[NL], hi[NL];
    for (int l = 0; l < NL; ++l) {
      const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + l * n)), b = _mm256_cvtps_pd(_mm_loadu_ps(x + l * n + 4));
      lo[l] = _mm256_mul_pd(a, a);
      hi[l] = _mm256_mul_pd(b, b);
    }
    for (int64_t i = 8; i < n; i += 8)
      for (int l = 0; l < NL; ++l) {
        const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + l * n + i));
        const __m256d b = _mm256_cvtps_pd(_mm_loadu_ps(x + l * n + i + 4));
        lo[l] = _mm256_fmadd_pd(a, a, lo[l]);
        hi[l] = _mm256_fmadd_pd(b, b, hi[l]);
      }
    for (int l = 0; l < NL; ++l) {
      alignas(32) double lane[8];
      _mm256_store_pd(lane, lo[l]);
      _mm256_store_pd(lane + 4, hi[l]);
      sums[l] = combine8(lane);
    }
  }
};

inline double sum_squares_ymm(const float* x, int64_t k) { return pairwise_sum_squares<LeavesYmm>(x, k); }

template <bool kNorm>
inline __m256 normed_ymm(const float* x, const float* w, __m256 inv_rms, int64_t i) {
  const __m256 v = _mm256_loadu_ps(x + i);
  return kNorm ? _mm256_mul_ps(_mm256_mul_ps(v, inv_rms), _mm256_loadu_ps(w + i)) : v;
}

inline int32_t hsum_epi32_ymm(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

template <bool kNorm>
void quantize_row_ymm(const float* x, int64_t k, const float* w, float inv_rms, int8_t* q, float* a,
                      int32_t* qsum) {
  const __m256 inv = _mm256_set1_ps(inv_rms);
  // |v| as uint32 bits: see quantize_row_zmm.
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  __m256i vmax = _mm256_setzero_si256();
  float* normed_row = kNorm ? row_buffer(k) : nullptr;  // the normed row, read again below
  for (int64_t i = 0; i < k; i += 8) {
    const __m256 v = normed_ymm<kNorm>(x, w, inv, i);
    if (kNorm) _mm256_storeu_ps(normed_row + i, v);
    vmax = _mm256_max_epu32(vmax, _mm256_and_si256(_mm256_castps_si256(v), absmask));
  }
  if (kNorm) x = normed_row;
  __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(vmax), _mm256_extracti128_si256(vmax, 1));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4E));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xB1));
  const uint32_t max_bits = static_cast<uint32_t>(_mm_cvtsi128_si32(m4));
  if (max_bits >= 0x7f800000u) {
    std::memset(q, 0, static_cast<size_t>(k));
    *a = std::nanf("");
    *qsum = 0;
    return;
  }
  float absmax;
  std::memcpy(&absmax, &max_bits, 4);
  const float scale = 127.0f / std::max(absmax, 1e-5f);
  const __m256 vs = _mm256_set1_ps(scale);
  // 32 values per step: saturating packs (== the clamp to [-128, 127]) then a dword permute
  // back to memory order; qsum via vpmaddubsw / vpmaddwd against ones.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  __m256i sum = _mm256_setzero_si256();
  for (int64_t i = 0; i < k; i += 32) {
    // cvtps rounds half to even (MXCSR default), like nearbyint in scalar.cc.
    __m256i qi[4];
    for (int j = 0; j < 4; ++j) qi[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), vs));
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    const __m256i qb = _mm256_permutevar8x32_epi32(b, order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), qb);
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qb), ones16));
  }
  *a = scale;
  *qsum = hsum_epi32_ymm(sum);
}

inline void quantize_ymm(const float* x, int64_t m, int64_t k, const float* norm_w, float eps, int8_t* q,
                         float* a, int32_t* qsum) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    if (norm_w) {
      const double ss = sum_squares_ymm(xr, k);
      const float inv_rms =
          static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(k) + static_cast<double>(eps)));
      quantize_row_ymm<true>(xr, k, norm_w, inv_rms, q + r * k, a + r, qsum + r);
    } else {
      quantize_row_ymm<false>(xr, k, nullptr, 1.0f, q + r * k, a + r, qsum + r);
    }
  }
}

// dot() for the 8-row panel layout, generic over how a code vector meets an activation vector.
// Ops supplies: step(acc, codes_u8, x_s8) (acc += products, in whatever lanes it keeps),
// widen(acc) -> int32 lanes, kChunkQuads (quads that step may add before widen is due: int16
// accumulators overflow), kMr / kMrDirect (tokens per microkernel).
template <class Ops>
struct YmmDot {
  static constexpr int64_t G = 8;
  static constexpr int64_t kKc = 2048;           // K block: 16 rows x 2 KB = 32 KB of L1
  static constexpr int64_t kBufferedMinM = 8;    // fewer tokens: unpack in registers

  struct Scale {  // fused epilogue: per-token a and the weight scale
    const float* a;
    float s_w;
    bool stream;  // output too large to stay in cache (kStreamBytes)
  };
  // Outputs from this size on are written with streaming stores (see avx512vnni.cc).
  static constexpr int64_t kStreamBytes = int64_t{8} << 20;

  // With the fused epilogue, earlier K blocks leave int32 partial sums in the float output's bytes.
  struct Dest {
    int32_t* out;  // element (row i, column g*G): may point before the tile's first column
    int64_t ld;
    const int32_t* qsum;
    __m256i mask[2];
    bool first, last;
    const float* a;  // fused epilogue (null: int32 sums): a of row i
    float s_w;
    bool stream;  // whole aligned rows of a float output use streaming stores
  };

  static __m256i lane_mask(int64_t g, int64_t n0, int64_t n1) {
    const __m256i col = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(g * G)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i ge = _mm256_cmpgt_epi32(col, _mm256_set1_epi32(static_cast<int>(n0 - 1)));
    const __m256i lt = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n1)), col);
    return _mm256_and_si256(ge, lt);
  }

  static Dest make_dest(int32_t* out, int64_t ld, const QuantizedRows& rows, int64_t i, int64_t m0, int64_t g,
                        int ng, int64_t n0, int64_t n1, bool first, bool last, const Scale* sc) {
    Dest d;
    d.out = out + (i - m0) * ld + (g * G - n0);
    d.ld = ld;
    d.qsum = rows.qsum + i;
    for (int j = 0; j < 2; ++j) d.mask[j] = j < ng ? lane_mask(g + j, n0, n1) : _mm256_setzero_si256();
    d.first = first;
    d.last = last;
    d.a = sc ? sc->a + i : nullptr;
    d.s_w = sc ? sc->s_w : 0.0f;
    d.stream = sc && sc->stream && (ld & 7) == 0;
    return d;
  }

  template <int MR, int NG>
  static void emit(__m256i (&acc)[MR][NG], const Dest& d) {
    #pragma GCC unroll 16
    for (int t = 0; t < MR; ++t)
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) {
        int* dst = d.out + t * d.ld + g * G;
        __m256i v = acc[t][g];
        if (!d.first) v = _mm256_add_epi32(v, _mm256_maskload_epi32(dst, d.mask[g]));
        if (d.last) v = _mm256_sub_epi32(v, _mm256_set1_epi32(d.qsum[t]));
        if (d.last && d.a) {  // y = (float(sum) / a) * s_w, in that order (DESIGN.md)
          const __m256 f = _mm256_div_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(d.a[t]));
          const __m256 y = _mm256_mul_ps(f, _mm256_set1_ps(d.s_w));
          if (d.stream && _mm256_movemask_epi8(d.mask[g]) == -1 && (reinterpret_cast<uintptr_t>(dst) & 31) == 0)
            _mm256_stream_ps(reinterpret_cast<float*>(dst), y);
          else
            _mm256_maskstore_ps(reinterpret_cast<float*>(dst), d.mask[g], y);
        } else {
          _mm256_maskstore_epi32(dst, d.mask[g], v);
        }
      }
  }

  static __m256i bcast(const int8_t* p) { return _mm256_set1_epi32(load_quad(p)); }

  // NG groups over one K block, unpacked to bytes as [quad][group][32].
  template <int NG>
  static void unpack_block(const uint8_t* grp, int64_t gstride, int64_t span0, int64_t nspans, uint8_t* buf) {
    const __m256i mask3 = _mm256_set1_epi8(3);
    for (int64_t sp = 0; sp < nspans; ++sp)
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) {
        const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + g * gstride + (span0 + sp) * 32));
        __m256i* dst = reinterpret_cast<__m256i*>(buf + (sp * 4 * NG + g) * 32);
        _mm256_store_si256(dst, _mm256_and_si256(p, mask3));
        _mm256_store_si256(dst + NG, _mm256_and_si256(_mm256_srli_epi16(p, 2), mask3));
        _mm256_store_si256(dst + 2 * NG, _mm256_and_si256(_mm256_srli_epi16(p, 4), mask3));
        _mm256_store_si256(dst + 3 * NG, _mm256_and_si256(_mm256_srli_epi16(p, 6), mask3));
      }
  }

  template <int MR, int NG>
  static void micro_buffered(const uint8_t* buf, int64_t nquads, const int8_t* q, int64_t ldq, const Dest& d) {
    __m256i sum[MR][NG];
    #pragma GCC unroll 16
    for (int t = 0; t < MR; ++t)
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) sum[t][g] = _mm256_setzero_si256();
    for (int64_t u0 = 0; u0 < nquads; u0 += Ops::kChunkQuads) {
      const int64_t u1 = std::min(nquads, u0 + Ops::kChunkQuads);
      __m256i acc[MR][NG];
      #pragma GCC unroll 16
      for (int t = 0; t < MR; ++t)
        #pragma GCC unroll 16
        for (int g = 0; g < NG; ++g) acc[t][g] = _mm256_setzero_si256();
      #pragma GCC unroll 4  // lets the allocator alternate registers: no accumulator moves
      for (int64_t u = u0; u < u1; ++u) {
        __m256i w[NG];
        #pragma GCC unroll 16
        for (int g = 0; g < NG; ++g) w[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf + (u * NG + g) * 32));
        #pragma GCC unroll 16
        for (int t = 0; t < MR; ++t) {
          const __m256i x = bcast(q + t * ldq + 4 * u);
          #pragma GCC unroll 16
          for (int g = 0; g < NG; ++g) acc[t][g] = Ops::step(acc[t][g], w[g], x);
        }
      }
      #pragma GCC unroll 16
      for (int t = 0; t < MR; ++t)
        #pragma GCC unroll 16
        for (int g = 0; g < NG; ++g) sum[t][g] = _mm256_add_epi32(sum[t][g], Ops::widen(acc[t][g]));
    }
    emit<MR, NG>(sum, d);
  }

  template <int NG>
  static void micro_buffered_any(int mr, const uint8_t* buf, int64_t nquads, const int8_t* q, int64_t ldq,
                                 const Dest& d) {
    static_assert(Ops::kMr <= 6, "extend the switch");
    switch (mr) {
      case 1: return micro_buffered<1, NG>(buf, nquads, q, ldq, d);
      case 2: return micro_buffered<2, NG>(buf, nquads, q, ldq, d);
      case 3: return micro_buffered<3, NG>(buf, nquads, q, ldq, d);
      case 4: return micro_buffered<4, NG>(buf, nquads, q, ldq, d);
      case 5: return micro_buffered<5, NG>(buf, nquads, q, ldq, d);
      case 6: return micro_buffered<6, NG>(buf, nquads, q, ldq, d);
    }
  }

  static void dot_buffered(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
                           int64_t n0, int64_t n1, int32_t* out, int64_t ld, const Scale* sc) {
    alignas(64) uint8_t buf[kKc * 2 * G];
    const int64_t gstride = group_stride(k, G);
    const int64_t g0 = n0 / G, g1 = panel_groups(n1, G);
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kc = std::min(kKc, k - k0);
      for (int64_t g = g0; g < g1; g += 2) {
        const int ng = g + 1 < g1 ? 2 : 1;
        const uint8_t* grp = packed + g * gstride;
        if (ng == 2)
          unpack_block<2>(grp, gstride, k0 / kSpan, kc / kSpan, buf);
        else
          unpack_block<1>(grp, gstride, k0 / kSpan, kc / kSpan, buf);
        for (int64_t i = m0; i < m1; i += Ops::kMr) {
          const int mr = static_cast<int>(std::min<int64_t>(Ops::kMr, m1 - i));
          const Dest d = make_dest(out, ld, rows, i, m0, g, ng, n0, n1, k0 == 0, k0 + kc == k, sc);
          const int8_t* q = rows.q + i * k + k0;
          if (ng == 2)
            micro_buffered_any<2>(mr, buf, kc / 4, q, k, d);
          else
            micro_buffered_any<1>(mr, buf, kc / 4, q, k, d);
        }
      }
    }
  }

  // Few tokens: unpack in registers (shift + mask), each code vector feeds MR tokens.
  template <int MR, int NG>
  static void micro_direct(const uint8_t* grp, int64_t gstride, int64_t nspans, const int8_t* q, int64_t ldq,
                           const Dest& d) {
    const __m256i mask3 = _mm256_set1_epi8(3);
    constexpr int64_t kChunkSpans = Ops::kChunkQuads / 4;
    __m256i sum[MR][NG];
    #pragma GCC unroll 16
    for (int t = 0; t < MR; ++t)
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) sum[t][g] = _mm256_setzero_si256();
    for (int64_t s0 = 0; s0 < nspans; s0 += kChunkSpans) {
      const int64_t s1 = std::min(nspans, s0 + kChunkSpans);
      __m256i acc[MR][NG];
      #pragma GCC unroll 16
      for (int t = 0; t < MR; ++t)
        #pragma GCC unroll 16
        for (int g = 0; g < NG; ++g) acc[t][g] = _mm256_setzero_si256();
      for (int64_t sp = s0; sp < s1; ++sp) {
        __m256i p[NG];
        #pragma GCC unroll 16
        for (int g = 0; g < NG; ++g)
          p[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + g * gstride + sp * 32));
        #pragma GCC unroll 16
        for (int s = 0; s < 4; ++s) {
          __m256i w[NG];
          #pragma GCC unroll 16
          for (int g = 0; g < NG; ++g) w[g] = _mm256_and_si256(_mm256_srli_epi16(p[g], 2 * s), mask3);
          #pragma GCC unroll 16
          for (int t = 0; t < MR; ++t) {
            const __m256i x = bcast(q + t * ldq + sp * kSpan + 4 * s);
            #pragma GCC unroll 16
            for (int g = 0; g < NG; ++g) acc[t][g] = Ops::step(acc[t][g], w[g], x);
          }
        }
      }
      #pragma GCC unroll 16
      for (int t = 0; t < MR; ++t)
        #pragma GCC unroll 16
        for (int g = 0; g < NG; ++g) sum[t][g] = _mm256_add_epi32(sum[t][g], Ops::widen(acc[t][g]));
    }
    emit<MR, NG>(sum, d);
  }

  // One token with int32 steps (Ops::kInt32Steps): field s masked in place is c * 4^s (<= 128,
  // still a u8), so each field gets its own accumulator and an exact shift at the end: one op
  // per code vector instead of shift + mask. (int16 steps would overflow on scaled codes.)
  template <int NG>
  static void micro_single(const uint8_t* grp, int64_t gstride, int64_t nspans, const int8_t* q, const Dest& d) {
    __m256i acc[4][NG];
    #pragma GCC unroll 16
    for (int s = 0; s < 4; ++s)
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) acc[s][g] = _mm256_setzero_si256();
    for (int64_t sp = 0; sp < nspans; ++sp) {
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) {
        const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + g * gstride + sp * 32));
        #pragma GCC unroll 16
        for (int s = 0; s < 4; ++s) {
          const __m256i w = _mm256_and_si256(p, _mm256_set1_epi8(static_cast<char>(3 << (2 * s))));
          acc[s][g] = Ops::step(acc[s][g], w, bcast(q + sp * kSpan + 4 * s));
        }
      }
    }
    __m256i sum[1][NG];
    #pragma GCC unroll 16
    for (int g = 0; g < NG; ++g)
      sum[0][g] = _mm256_add_epi32(_mm256_add_epi32(acc[0][g], _mm256_srai_epi32(acc[1][g], 2)),
                                   _mm256_add_epi32(_mm256_srai_epi32(acc[2][g], 4), _mm256_srai_epi32(acc[3][g], 6)));
    emit<1, NG>(sum, d);
  }

  template <int NG>
  static void direct_any(int mr, const uint8_t* grp, int64_t gstride, int64_t nspans, const int8_t* q,
                         int64_t ldq, const Dest& d) {
    switch (mr) {
      case 1:
        if (Ops::kInt32Steps) return micro_single<NG>(grp, gstride, nspans, q, d);
        return micro_direct<1, NG>(grp, gstride, nspans, q, ldq, d);
      case 2: return micro_direct<2, NG>(grp, gstride, nspans, q, ldq, d);
      case 3: return micro_direct<3, NG>(grp, gstride, nspans, q, ldq, d);
    }
  }

  static void dot_direct(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
                         int64_t n0, int64_t n1, int32_t* out, int64_t ld, const Scale* sc) {
    constexpr int kDirectMr = 3;
    const int64_t gstride = group_stride(k, G);
    const int64_t g0 = n0 / G, g1 = panel_groups(n1, G);
    for (int64_t i = m0; i < m1; i += kDirectMr) {
      const int mr = static_cast<int>(std::min<int64_t>(kDirectMr, m1 - i));
      for (int64_t g = g0; g < g1; g += 2) {
        const int ng = g + 1 < g1 ? 2 : 1;
        const Dest d = make_dest(out, ld, rows, i, m0, g, ng, n0, n1, true, true, sc);
        const uint8_t* grp = packed + g * gstride;
        const int8_t* q = rows.q + i * k;
        if (ng == 2)
          direct_any<2>(mr, grp, gstride, k / kSpan, q, k, d);
        else
          direct_any<1>(mr, grp, gstride, k / kSpan, q, k, d);
      }
    }
  }

  static void dot_any(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
                      int64_t n0, int64_t n1, int32_t* out, int64_t ld, const Scale* sc) {
    if (m1 <= m0 || n1 <= n0) return;
    if (m1 - m0 >= kBufferedMinM)
      dot_buffered(packed, k, rows, m0, m1, n0, n1, out, ld, sc);
    else
      dot_direct(packed, k, rows, m0, m1, n0, n1, out, ld, sc);
  }

  static void dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
                  int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
    (void)n;
    dot_any(packed, k, rows, m0, m1, n0, n1, out, ld, nullptr);
  }

  // dot() with the op's epilogue fused: y[(i - m0) * ldy + (j - n0)] = (float(sum) / a[i]) * s_w.
  static void dot_scaled(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, float s_w,
                         int64_t m0, int64_t m1, int64_t n0, int64_t n1, float* y, int64_t ldy) {
    const Scale sc{rows.a, s_w, rows.m * n * 4 >= kStreamBytes};
    dot_any(packed, k, rows, m0, m1, n0, n1, reinterpret_cast<int32_t*>(y), ldy, &sc);
    if (sc.stream) _mm_sfence();  // streaming stores are weakly ordered: publish y first
  }
};
#endif  // __AVX2__

}  // namespace
}  // namespace x86
}  // namespace bitnet_onnx
