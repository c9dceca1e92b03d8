// AVX512-VNNI kernel (zmm vpdpbusd). Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq
// -mavx512vnni -mfma -mf16c only; selected at run time by dispatch.cc.
//
// Weights: the 16-row panel layout of x86_common.h (one 64-byte load = 16 rows x 16 columns of
// 2-bit codes). dot() computes sum_k c*q - qsum with unsigned codes c = T + 1 in two ways:
//  - many tokens: per 32-row panel and 1024-column K block, codes are unpacked once into an L1
//    buffer of bytes, then a register-blocked microkernel (up to 12 tokens x 32 rows, 24 zmm
//    accumulators) runs pure load + vpdpbusd over it, activations broadcast 4 bytes at a time;
//  - few tokens: codes are unpacked in registers (shift + mask), reused across the tokens; a
//    single token skips the shifts (mask only, per-field accumulators rescaled at the end) and
//    prefetches its weight streams (it is bound by L3 bandwidth).
// dot_scaled() fuses the op's epilogue (y = (float(sum) / a) * s_w) into the stores.
// GCC 12's intrinsic headers trip -W(maybe-)uninitialized on their undefined passthrough operands
// (GCC bug 105593); the warnings are about the headers, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "i2s_kernel.h"
#include "x86_common.h"

namespace bitnet_onnx {
namespace {

using namespace x86;

constexpr int64_t G = 16;           // rows per group = int32 lanes of a zmm
constexpr int kMaxMr = 12;          // tokens per buffered microkernel (24 accumulators)
constexpr int64_t kKc = 1024;       // K block of the buffered path: 32 rows x 1 KB = 32 KB of L1
constexpr int64_t kBufferedMinM = 16;  // fewer tokens: unpack in registers instead

size_t packed_bytes(int64_t n, int64_t k) { return panel_bytes(n, k, G); }

void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) { repack_panels<G>(i2s, n, k, packed); }

// ---------------------------------------------------------------------------------------------
// Integer sums.

inline __m512i bcast_quad(const int8_t* p) { return _mm512_set1_epi32(load_quad(p)); }

// Lanes of group g that fall inside [n0, n1).
inline __mmask16 lane_mask(int64_t g, int64_t n0, int64_t n1) {
  const int64_t lo = std::max<int64_t>(n0 - g * G, 0), hi = std::min<int64_t>(n1 - g * G, G);
  return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

// Where one microkernel's results go: rows [i, i+mr) x groups [g, g+ng) of the output tile.
// The op's epilogue, y = (float(sum) / a) * s_w, in that order (DESIGN.md).
inline __m512 scale_sums(__m512i sums, float a, float s_w) {
  return _mm512_mul_ps(_mm512_div_ps(_mm512_cvtepi32_ps(sums), _mm512_set1_ps(a)), _mm512_set1_ps(s_w));
}

struct Scale {  // fused epilogue: per-token a and the weight scale
  const float* a;
  float s_w;
  bool stream;  // output too large to stay in cache (kStreamBytes)
};

// Outputs from this size on are written with streaming stores (no read-for-ownership): on the
// 2 MiB-L2 Xeon of BENCHMARKS.md they pay off at M=2048 (8-25 MB per projection) and cost at
// M=512 (2-6 MB).
constexpr int64_t kStreamBytes = int64_t{8} << 20;

// Where one microkernel's results go: rows [i, i+mr) x groups [g, g+ng) of the output tile.
// With the fused epilogue, earlier K blocks leave int32 partial sums in the float output's bytes.
struct Dest {
  int32_t* out;  // out element of (row i, column g*G), possibly before the tile's first column
  int64_t ld;
  const int32_t* qsum;  // qsum of row i
  __mmask16 mask[4];
  bool first, last;  // first / last K block: start from zero / subtract qsum
  const float* a;    // fused epilogue (null: int32 sums): a of row i; out is then float memory
  float s_w;
  bool stream;  // float output too large to stay in cache: whole aligned lines use streaming stores
};

template <int MR, int NG>
inline void emit(__m512i (&acc)[MR][NG], const Dest& d) {
  #pragma GCC unroll 16
  for (int t = 0; t < MR; ++t)
    #pragma GCC unroll 16
    for (int g = 0; g < NG; ++g) {
      int32_t* dst = d.out + t * d.ld + g * G;
      __m512i v = acc[t][g];
      if (!d.first) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(d.mask[g], dst));
      if (d.last) v = _mm512_sub_epi32(v, _mm512_set1_epi32(d.qsum[t]));
      if (d.last && d.a && d.stream && d.mask[g] == 0xFFFF && (reinterpret_cast<uintptr_t>(dst) & 63) == 0)
        _mm512_stream_ps(reinterpret_cast<float*>(dst), scale_sums(v, d.a[t], d.s_w));
      else if (d.last && d.a)
        _mm512_mask_storeu_ps(dst, d.mask[g], scale_sums(v, d.a[t], d.s_w));
      else
        _mm512_mask_storeu_epi32(dst, d.mask[g], v);
    }
}

// Buffered path: NG groups' codes over one K block, unpacked to bytes as [quad][group][64].
template <int NG>
void unpack_block(const uint8_t* grp, int64_t gstride, int64_t span0, int64_t nspans, uint8_t* buf) {
  const __m512i mask3 = _mm512_set1_epi8(3);
  for (int64_t sp = 0; sp < nspans; ++sp)
    #pragma GCC unroll 16
    for (int g = 0; g < NG; ++g) {
      const __m512i p = _mm512_loadu_si512(grp + g * gstride + (span0 + sp) * 64);
      uint8_t* dst = buf + (sp * 4 * NG + g) * 64;
      _mm512_store_si512(dst, _mm512_and_si512(p, mask3));
      _mm512_store_si512(dst + NG * 64, _mm512_and_si512(_mm512_srli_epi16(p, 2), mask3));
      _mm512_store_si512(dst + 2 * NG * 64, _mm512_and_si512(_mm512_srli_epi16(p, 4), mask3));
      _mm512_store_si512(dst + 3 * NG * 64, _mm512_and_si512(_mm512_srli_epi16(p, 6), mask3));
    }
}

template <int MR, int NG>
void micro_buffered(const uint8_t* buf, int64_t nquads, const int8_t* q, int64_t ldq, const Dest& d) {
  __m512i acc[MR][NG];
  #pragma GCC unroll 16
  for (int t = 0; t < MR; ++t)
    #pragma GCC unroll 16
    for (int g = 0; g < NG; ++g) acc[t][g] = _mm512_setzero_si512();
  #pragma GCC unroll 2  // lets the allocator alternate registers: no accumulator moves
  for (int64_t u = 0; u < nquads; ++u) {
    __m512i w[NG];
    #pragma GCC unroll 16
    for (int g = 0; g < NG; ++g) w[g] = _mm512_load_si512(buf + (u * NG + g) * 64);
    #pragma GCC unroll 16
    for (int t = 0; t < MR; ++t) {
      const __m512i x = bcast_quad(q + t * ldq + 4 * u);
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) acc[t][g] = _mm512_dpbusd_epi32(acc[t][g], w[g], x);
    }
  }
  emit<MR, NG>(acc, d);
}

template <int NG>
void micro_buffered_any(int mr, const uint8_t* buf, int64_t nquads, const int8_t* q, int64_t ldq, const Dest& d) {
  switch (mr) {
#define BITNET_CASE(R) \
  case R:              \
    return micro_buffered<R, NG>(buf, nquads, q, ldq, d);
    BITNET_CASE(1) BITNET_CASE(2) BITNET_CASE(3) BITNET_CASE(4) BITNET_CASE(5) BITNET_CASE(6)
    BITNET_CASE(7) BITNET_CASE(8) BITNET_CASE(9) BITNET_CASE(10) BITNET_CASE(11) BITNET_CASE(12)
#undef BITNET_CASE
  }
}

Dest make_dest(int32_t* out, int64_t ld, const QuantizedRows& rows, int64_t i, int64_t m0, int64_t g, int ng,
               int64_t n0, int64_t n1, bool first, bool last,
               const Scale* sc) {
  Dest d;
  d.out = out + (i - m0) * ld + (g * G - n0);
  d.ld = ld;
  d.qsum = rows.qsum + i;
  for (int j = 0; j < 4; ++j) d.mask[j] = j < ng ? lane_mask(g + j, n0, n1) : 0;
  d.first = first;
  d.last = last;
  d.a = sc ? sc->a + i : nullptr;
  d.s_w = sc ? sc->s_w : 0.0f;
  d.stream = sc && sc->stream && (ld & 15) == 0;
  return d;
}

void dot_buffered(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
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
      for (int64_t i = m0; i < m1; i += kMaxMr) {
        const int mr = static_cast<int>(std::min<int64_t>(kMaxMr, m1 - i));
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

// Few tokens: unpack in registers (shift + mask), each unpacked vector feeds MR tokens.
template <int MR, int NG>
void micro_direct(const uint8_t* grp, int64_t gstride, int64_t nspans, const int8_t* q, int64_t ldq, const Dest& d) {
  const __m512i mask3 = _mm512_set1_epi8(3);
  __m512i acc[MR][NG];
  #pragma GCC unroll 16
  for (int t = 0; t < MR; ++t)
    #pragma GCC unroll 16
    for (int g = 0; g < NG; ++g) acc[t][g] = _mm512_setzero_si512();
  for (int64_t sp = 0; sp < nspans; ++sp) {
    __m512i p[NG];
    #pragma GCC unroll 16
    for (int g = 0; g < NG; ++g) p[g] = _mm512_loadu_si512(grp + g * gstride + sp * 64);
    #pragma GCC unroll 16
    for (int s = 0; s < 4; ++s) {
      __m512i w[NG];
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) w[g] = _mm512_and_si512(_mm512_srli_epi16(p[g], 2 * s), mask3);
      #pragma GCC unroll 16
      for (int t = 0; t < MR; ++t) {
        const __m512i x = bcast_quad(q + t * ldq + sp * kSpan + 4 * s);
        #pragma GCC unroll 16
        for (int g = 0; g < NG; ++g) acc[t][g] = _mm512_dpbusd_epi32(acc[t][g], w[g], x);
      }
    }
  }
  emit<MR, NG>(acc, d);
}

constexpr int64_t kPrefetchSpans = 16;  // 1 KB ahead per weight stream (L3-bound at M = 1)

// One token: field s masked in place is c * 4^s (<= 128, still a u8), so each field gets its
// own accumulator and an exact arithmetic shift at the end: 1 op per unpacked vector, no shifts.
template <int NG>
void micro_single(const uint8_t* grp, int64_t gstride, int64_t nspans, const int8_t* q, const Dest& d) {
  __m512i acc[4][NG];
  #pragma GCC unroll 16
  for (int s = 0; s < 4; ++s)
    #pragma GCC unroll 16
    for (int g = 0; g < NG; ++g) acc[s][g] = _mm512_setzero_si512();
  for (int64_t sp = 0; sp < nspans; ++sp) {
    #pragma GCC unroll 16
    for (int g = 0; g < NG; ++g) {
      const __m512i p = _mm512_loadu_si512(grp + g * gstride + sp * 64);
      _mm_prefetch(reinterpret_cast<const char*>(grp + g * gstride + (sp + kPrefetchSpans) * 64), _MM_HINT_T0);
      #pragma GCC unroll 16
      for (int s = 0; s < 4; ++s) {
        const __m512i w = _mm512_and_si512(p, _mm512_set1_epi8(static_cast<char>(3 << (2 * s))));
        acc[s][g] = _mm512_dpbusd_epi32(acc[s][g], w, bcast_quad(q + sp * kSpan + 4 * s));
      }
    }
  }
  // maskz form: GCC 12 warns about the undefined passthrough of the plain srai intrinsic.
  const __mmask16 all = 0xFFFF;
  __m512i sum[1][NG];
  #pragma GCC unroll 16
  for (int g = 0; g < NG; ++g)
    sum[0][g] = _mm512_add_epi32(
        _mm512_add_epi32(acc[0][g], _mm512_maskz_srai_epi32(all, acc[1][g], 2)),
        _mm512_add_epi32(_mm512_maskz_srai_epi32(all, acc[2][g], 4), _mm512_maskz_srai_epi32(all, acc[3][g], 6)));
  emit<1, NG>(sum, d);
}

constexpr int kDirectMr = 4;
constexpr int kDirectNg = 4;

template <int NG>
void direct_any(int mr, const uint8_t* grp, int64_t gstride, int64_t nspans, const int8_t* q, int64_t ldq,
                const Dest& d) {
  switch (mr) {
    case 1: return micro_single<NG>(grp, gstride, nspans, q, d);
    case 2: return micro_direct<2, NG>(grp, gstride, nspans, q, ldq, d);
    case 3: return micro_direct<3, NG>(grp, gstride, nspans, q, ldq, d);
    case 4: return micro_direct<4, NG>(grp, gstride, nspans, q, ldq, d);
  }
}

void dot_direct(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1, int64_t n0,
                int64_t n1, int32_t* out, int64_t ld, const Scale* sc) {
  const int64_t gstride = group_stride(k, G);
  const int64_t g0 = n0 / G, g1 = panel_groups(n1, G);
  for (int64_t i = m0; i < m1; i += kDirectMr) {
    const int mr = static_cast<int>(std::min<int64_t>(kDirectMr, m1 - i));
    for (int64_t g = g0; g < g1; g += kDirectNg) {
      const int ng = static_cast<int>(std::min<int64_t>(kDirectNg, g1 - g));
      const Dest d = make_dest(out, ld, rows, i, m0, g, ng, n0, n1, true, true, sc);
      const uint8_t* grp = packed + g * gstride;
      const int8_t* q = rows.q + i * k;
      switch (ng) {
        case 1: direct_any<1>(mr, grp, gstride, k / kSpan, q, k, d); break;
        case 2: direct_any<2>(mr, grp, gstride, k / kSpan, q, k, d); break;
        case 3: direct_any<3>(mr, grp, gstride, k / kSpan, q, k, d); break;
        default: direct_any<4>(mr, grp, gstride, k / kSpan, q, k, d); break;
      }
    }
  }
}

void dot_any(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1, int64_t n0,
             int64_t n1, int32_t* out, int64_t ld, const Scale* sc) {
  if (m1 <= m0 || n1 <= n0) return;
  if (m1 - m0 >= kBufferedMinM)
    dot_buffered(packed, k, rows, m0, m1, n0, n1, out, ld, sc);
  else
    dot_direct(packed, k, rows, m0, m1, n0, n1, out, ld, sc);
}

void dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
         int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  (void)n;
  dot_any(packed, k, rows, m0, m1, n0, n1, out, ld, nullptr);
}

// dot() with the op's epilogue fused: y[(i - m0) * ldy + (j - n0)] = (float(sum) / rows.a[i]) * s_w.
void dot_scaled(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, float s_w, int64_t m0,
                int64_t m1, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const Scale sc{rows.a, s_w, rows.m * n * 4 >= kStreamBytes};
  dot_any(packed, k, rows, m0, m1, n0, n1, reinterpret_cast<int32_t*>(y), ldy, &sc);
  if (sc.stream) _mm_sfence();  // streaming stores are weakly ordered: publish y first
}

const I2SKernel kAvx512Vnni = {"avx512vnni", packed_bytes, repack, quantize_zmm, dot,
                               /*tile_m=*/256, /*tile_n=*/256, dot_scaled};

}  // namespace

const I2SKernel* avx512vnni_kernel() { return &kAvx512Vnni; }

}  // namespace bitnet_onnx
