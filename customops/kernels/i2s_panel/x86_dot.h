// dot() and dot_scaled() of the x86 multiply kernels, written once for both vector widths (simd/x86.h)
// over the panel layout of layout.h, and the kernel table they make (panel_kernel). Shared by the
// families that run them (i2s/mul/: the ISA's multiply kernels; i2s/mul_direct/: the same with the
// direct path at every M), which link kernel_i2s_panel. An ISA supplies only how a vector of codes
// meets a vector of activations and its tile sizes (Ops; VnniOps for vpdpbusd, Avx2Ops for
// vpmaddubsw):
//
//   struct Ops {
//     static V::I step(V::I acc, V::I codes_u8, V::I x_s8);  // acc += products (in its own lanes)
//     static V::I widen(V::I acc);         // acc's lanes -> int32 lanes
//     kInt32Steps    step accumulates in int32 (else int16: widen every kChunkQuads quads)
//     kChunkQuads    quads step may add before widen is due
//     kMr            tokens per buffered microkernel (x kNg groups of V::G rows, all in registers)
//     kNg            groups per buffered microkernel
//     kDirectMr      tokens per direct microkernel, kDirectNg groups
//     kSingleNg      groups of the one-token microkernel (int32 steps only)
//     kKc            K block of the buffered path (its unpacked codes stay in L1)
//     kBufferedMinM  from this many tokens on, the buffered path
//   };
//
// dot() computes sum_k c*q - qsum with unsigned codes c = T + 1 in two ways:
//  - many tokens (buffered): per kNg-group panel and K block, codes are unpacked once into an L1
//    buffer of bytes [quad][group][V::kBytes]; then a register-blocked microkernel (kMr tokens x
//    kNg groups of accumulators) runs load + step over it, activations broadcast 4 bytes at a time;
//  - few tokens (direct): codes are unpacked in registers (shift + mask) and reused across the
//    tokens; a single token with int32 steps and K <= 2^19 skips the shifts (mask only, per-field
//    accumulators rescaled at the end) and prefetches its weight streams (bound by cache bandwidth).
// dot_scaled() fuses the op's epilogue (y = (float(sum) / a) * s_w) into the stores.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "family.h"
#include "i2s_panel/layout.h"
#include "simd/x86.h"
#include "with_const.h"

// Stage switches and counters for customops/tests/panel_profile.cc, which compiles an ISA's kernel file
// with its own definitions to time the buffered path with stages left out; in the library every stage
// runs and nothing is counted.
#ifndef BITNET_PANEL_RUN
#define BITNET_PANEL_RUN(stage) true
#define BITNET_PANEL_COUNT(counter, n) ((void)0)
#endif

namespace bitnet_onnx::i2s_panel::x86 {
namespace {

using i2s::I2SKernel;
using i2s::QuantizedRows;
using i2s::QuantizeFn;

inline int32_t load_quad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

template <class V, class Ops>
struct PanelDot {
  using I = typename V::I;
  static constexpr int64_t G = V::kInt32Lanes;  // rows per panel group
  static constexpr int kMaxNg = std::max({Ops::kNg, Ops::kDirectNg, Ops::kSingleNg});
  // Outputs from this size on are written with streaming stores (no read-for-ownership): on the
  // 2 MiB-L2 Xeon of BENCHMARKS.md they paid off at M=2048 (8-25 MB per projection) and cost at
  // M=512 (2-6 MB).
  static constexpr int64_t kStreamBytes = int64_t{8} << 20;

  struct Scale {  // fused epilogue: per-token a and the weight scale
    const float* a;
    float s_w;
    bool stream;  // output too large to stay in cache (kStreamBytes)
  };

  // Where one microkernel's results go: rows [i, i+mr) x groups [g, g+ng) of the output tile.
  // With the fused epilogue, earlier K blocks leave int32 partial sums in the float output's bytes.
  struct Dest {
    int32_t* out;  // out element of (row i, column g*G), possibly before the tile's first column
    int64_t ld;
    const int32_t* qsum;  // qsum of row i
    typename V::Mask mask[kMaxNg];
    // Every lane of group j's vector is in the tile: plain loads and stores. AVX2's masked ones
    // (vpmaskmovd, vmaskmovps) cost a dozen cycles a store on AMD Zen; measured a tenth of the
    // avx2 kernel's time at M = 128-512 (benchmarks/panel_profile.py).
    bool whole[kMaxNg];
    bool first, last;  // first / last K block: start from zero / subtract qsum
    const float* a;    // fused epilogue (null: int32 sums): a of row i; out is then float memory
    float s_w;
    bool stream;  // float output too large to stay in cache: whole aligned vectors are streamed
  };

  static Dest make_dest(int32_t* out, int64_t ld, const QuantizedRows& rows, int64_t i, int64_t m0, int64_t g, int ng,
                        int64_t n0, int64_t n1, bool first, bool last, const Scale* sc) {
    Dest d;
    d.out = out + (i - m0) * ld + (g * G - n0);
    d.ld = ld;
    d.qsum = rows.qsum + i;
    for (int j = 0; j < kMaxNg; ++j) {
      d.mask[j] = j < ng ? V::lane_mask(g + j, n0, n1) : V::no_lanes();
      d.whole[j] = V::all_lanes(d.mask[j]);
    }
    d.first = first;
    d.last = last;
    d.a = sc ? sc->a + i : nullptr;
    d.s_w = sc ? sc->s_w : 0.0f;
    d.stream = sc && sc->stream && ld % G == 0;
    return d;
  }

  template <int MR, int NG>
  static void emit(I (&acc)[MR][NG], const Dest& d) {
    if (!BITNET_PANEL_RUN(emit)) return;
    #pragma GCC unroll 16
    for (int t = 0; t < MR; ++t)
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) {
        int32_t* dst = d.out + t * d.ld + g * G;
        I v = acc[t][g];
        if (!d.first) v = V::add32(v, d.whole[g] ? V::loadu(dst) : V::maskload32(dst, d.mask[g]));
        if (d.last) v = V::sub32(v, V::dwords(d.qsum[t]));
        float* y = reinterpret_cast<float*>(dst);
        if (d.last && d.a) {
          const typename V::F f = simd::scale_sums<V>(v, d.a[t], d.s_w);
          if (d.stream && d.whole[g] && reinterpret_cast<uintptr_t>(dst) % V::kBytes == 0)
            V::stream_ps(y, f);
          else if (d.whole[g])
            V::storeu_ps(y, f);
          else
            V::maskstore_ps(y, d.mask[g], f);
        } else if (d.whole[g]) {
          V::storeu(dst, v);
        } else {
          V::maskstore32(dst, d.mask[g], v);
        }
      }
  }

  static I bcast(const int8_t* p) { return V::dwords(load_quad(p)); }

  // The lines emit() will write, fetched for writing while the K loop runs (not those it will stream
  // out). Each line of the output is written once per K block, rows ld apart, which the hardware
  // prefetchers do not fetch ahead: the stores missed at the end of the call and, waiting in the store
  // buffer, held up the next call's loads of the same 4 KB offsets (rows 4 KB apart alias the code
  // buffer's). Measured on Zen 4 (benchmarks/panel_profile.py, 64-byte aligned outputs as ORT's):
  // emit() from 10-20% of the avx512vnni kernel's time at M = 128-512 to 2-6%.
  template <int MR, int NG>
  static void prefetch_dest(const Dest& d) {
    constexpr int kGroupsPerLine = 64 / V::kBytes > 1 ? 64 / V::kBytes : 1;
    #pragma GCC unroll 16
    for (int t = 0; t < MR; ++t)
      #pragma GCC unroll 16
      for (int g = 0; g < NG; g += kGroupsPerLine) __builtin_prefetch(d.out + t * d.ld + g * G, 1, 3);
  }

  // ---- a register tile of R x NG accumulators

  template <int R, int NG>
  static void clear(I (&acc)[R][NG]) {
    #pragma GCC unroll 16
    for (int t = 0; t < R; ++t)
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) acc[t][g] = V::zero();
  }

  // One quad of K: acc[t][g] += codes w[g] x the 4 activations of token t (at q + t * ldq).
  template <int MR, int NG>
  static void step_tile(I (&acc)[MR][NG], const I (&w)[NG], const int8_t* q, int64_t ldq) {
    #pragma GCC unroll 16
    for (int t = 0; t < MR; ++t) {
      const I x = bcast(q + t * ldq);
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) acc[t][g] = Ops::step(acc[t][g], w[g], x);
    }
  }

  // A chunk's accumulators (Ops::kChunkQuads quads at the most) into the int32 sums; the first
  // chunk starts them.
  template <int MR, int NG>
  static void add_widened(I (&sum)[MR][NG], const I (&acc)[MR][NG], bool first) {
    const bool run = BITNET_PANEL_RUN(widen);  // left out: the chunk's sums copied as they are
    #pragma GCC unroll 16
    for (int t = 0; t < MR; ++t)
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g)
        sum[t][g] = !run ? acc[t][g] : first ? Ops::widen(acc[t][g]) : V::add32(sum[t][g], Ops::widen(acc[t][g]));
  }

  // ---- many tokens: codes unpacked once per panel and K block

  template <int NG>
  static void unpack_block(const uint8_t* grp, int64_t gstride, int64_t span0, int64_t nspans, uint8_t* buf) {
    BITNET_PANEL_COUNT(unpacked_bytes, nspans * 4 * NG * V::kBytes);
    if (!BITNET_PANEL_RUN(unpack)) return;
    const I mask3 = V::bytes(3);
    for (int64_t sp = 0; sp < nspans; ++sp)
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) {
        const I p = V::loadu(grp + g * gstride + (span0 + sp) * V::kBytes);
        uint8_t* dst = buf + (sp * 4 * NG + g) * V::kBytes;
        V::store(dst, V::and_(p, mask3));
        V::store(dst + NG * V::kBytes, V::and_(V::srli16(p, 2), mask3));
        V::store(dst + 2 * NG * V::kBytes, V::and_(V::srli16(p, 4), mask3));
        V::store(dst + 3 * NG * V::kBytes, V::and_(V::srli16(p, 6), mask3));
      }
  }

  template <int MR, int NG>
  static void micro_buffered(const uint8_t* buf, int64_t nquads, const int8_t* q, int64_t ldq, const Dest& d) {
    if (!(d.last && d.stream)) prefetch_dest<MR, NG>(d);
    I sum[MR][NG];
    for (int64_t u0 = 0; u0 < nquads; u0 += Ops::kChunkQuads) {
      const int64_t u1 = std::min(nquads, u0 + Ops::kChunkQuads);
      I acc[MR][NG];
      clear(acc);
      BITNET_PANEL_COUNT(steps, MR * NG * (u1 - u0));
      const int64_t u_end = BITNET_PANEL_RUN(steps) ? u1 : u0;
      #pragma GCC unroll 2  // lets the allocator alternate registers: no accumulator moves
      for (int64_t u = u0; u < u_end; ++u) {
        I w[NG];
        #pragma GCC unroll 16
        for (int g = 0; g < NG; ++g) w[g] = V::load(buf + (u * NG + g) * V::kBytes);
        // step_tile spelled out: through it, GCC allocated this unroll-2 loop's registers worse (a
        // third slower at 16 tokens, avx512vnni on Zen 4)
        #pragma GCC unroll 16
        for (int t = 0; t < MR; ++t) {
          const I x = bcast(q + t * ldq + 4 * u);
          #pragma GCC unroll 16
          for (int g = 0; g < NG; ++g) acc[t][g] = Ops::step(acc[t][g], w[g], x);
        }
      }
      add_widened(sum, acc, u0 == 0);
    }
    emit<MR, NG>(sum, d);
  }

  static void dot_buffered(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
                           int64_t n0, int64_t n1, int32_t* out, int64_t ld, const Scale* sc) {
    alignas(64) uint8_t buf[Ops::kKc / 4 * Ops::kNg * V::kBytes];
    const int64_t gstride = group_stride(k, G);
    const int64_t g0 = n0 / G, g1 = panel_groups(n1, G);
    for (int64_t k0 = 0; k0 < k; k0 += Ops::kKc) {
      const int64_t kc = std::min<int64_t>(Ops::kKc, k - k0);
      for (int64_t g = g0; g < g1; g += Ops::kNg) {
        const int ng = static_cast<int>(std::min<int64_t>(Ops::kNg, g1 - g));
        const uint8_t* grp = packed + g * gstride;
        with_const<Ops::kNg>(ng, [&](auto NG) {
          unpack_block<NG>(grp, gstride, k0 / kSpan, kc / kSpan, buf);
          for (int64_t i = m0; i < m1; i += Ops::kMr) {
            const int mr = static_cast<int>(std::min<int64_t>(Ops::kMr, m1 - i));
            const Dest d = make_dest(out, ld, rows, i, m0, g, ng, n0, n1, k0 == 0, k0 + kc == k, sc);
            const int8_t* q = rows.q + i * k + k0;
            with_const<Ops::kMr>(mr, [&](auto MR) { micro_buffered<MR, NG>(buf, kc / 4, q, k, d); });
          }
        });
      }
    }
  }

  // ---- few tokens: codes unpacked in registers

  template <int MR, int NG>
  static void micro_direct(const uint8_t* grp, int64_t gstride, int64_t nspans, const int8_t* q, int64_t ldq,
                           const Dest& d) {
    const I mask3 = V::bytes(3);
    constexpr int64_t kChunkSpans = Ops::kChunkQuads / 4;
    I sum[MR][NG];
    for (int64_t s0 = 0; s0 < nspans; s0 += kChunkSpans) {
      const int64_t s1 = std::min(nspans, s0 + kChunkSpans);
      I acc[MR][NG];
      clear(acc);
      for (int64_t sp = s0; sp < s1; ++sp) {
        I p[NG];
        #pragma GCC unroll 16
        for (int g = 0; g < NG; ++g) p[g] = V::loadu(grp + g * gstride + sp * V::kBytes);
        #pragma GCC unroll 16
        for (int s = 0; s < 4; ++s) {
          I w[NG];
          #pragma GCC unroll 16
          for (int g = 0; g < NG; ++g) w[g] = V::and_(V::srli16(p[g], 2 * s), mask3);
          step_tile(acc, w, q + sp * kSpan + 4 * s, ldq);
        }
      }
      add_widened(sum, acc, s0 == 0);
    }
    emit<MR, NG>(sum, d);
  }

  // One token with int32 steps: field s masked in place is c * 4^s (<= 128, still a u8), so each
  // field gets its own accumulator and an exact arithmetic shift at the end: one op per code
  // vector instead of shift + mask. (int16 steps would overflow on the scaled codes.)
  // The shift is exact only while 4^s times the field's sum fits int32: field 3 holds
  // 64 * sum over K/4 columns, |sum| <= 2 * 128 * K/4, so K <= kSingleMaxK. Beyond, one token
  // takes micro_direct, whose accumulators hold unscaled sums (exact modulo 2^32, so exact once
  // the result fits int32).
  static constexpr int64_t kSingleMaxK = int64_t{1} << 19;

  template <int NG>
  static void micro_single(const uint8_t* grp, int64_t gstride, int64_t nspans, const int8_t* q, const Dest& d) {
    I acc[4][NG];  // one row of accumulators per field s
    clear(acc);
    for (int64_t sp = 0; sp < nspans; ++sp) {
      #pragma GCC unroll 16
      for (int g = 0; g < NG; ++g) {
        const uint8_t* src = grp + g * gstride + sp * V::kBytes;
        const I p = V::loadu(src);
        if ((sp * V::kBytes) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(src + 1024), _MM_HINT_T0);
        #pragma GCC unroll 16
        for (int s = 0; s < 4; ++s) {
          const I w = V::and_(p, V::bytes(static_cast<int8_t>(3 << (2 * s))));
          acc[s][g] = Ops::step(acc[s][g], w, bcast(q + sp * kSpan + 4 * s));
        }
      }
    }
    I sum[1][NG];
    #pragma GCC unroll 16
    for (int g = 0; g < NG; ++g)
      sum[0][g] = V::add32(V::add32(acc[0][g], V::template srai32<2>(acc[1][g])),
                           V::add32(V::template srai32<4>(acc[2][g]), V::template srai32<6>(acc[3][g])));
    emit<1, NG>(sum, d);
  }

  static void dot_direct(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
                         int64_t n0, int64_t n1, int32_t* out, int64_t ld, const Scale* sc) {
    const int64_t gstride = group_stride(k, G);
    const int64_t g0 = n0 / G, g1 = panel_groups(n1, G);
    for (int64_t i = m0; i < m1; i += Ops::kDirectMr) {
      const int mr = static_cast<int>(std::min<int64_t>(Ops::kDirectMr, m1 - i));
      const bool single = Ops::kInt32Steps && mr == 1 && k <= kSingleMaxK;
      const int64_t step_ng = single ? Ops::kSingleNg : Ops::kDirectNg;
      for (int64_t g = g0; g < g1; g += step_ng) {
        const int ng = static_cast<int>(std::min<int64_t>(step_ng, g1 - g));
        const Dest d = make_dest(out, ld, rows, i, m0, g, ng, n0, n1, true, true, sc);
        const uint8_t* grp = packed + g * gstride;
        const int8_t* q = rows.q + i * k;
        if (single) {
          with_const<Ops::kSingleNg>(ng, [&](auto NG) { micro_single<NG>(grp, gstride, k / kSpan, q, d); });
        } else {
          with_const<Ops::kDirectNg>(ng, [&](auto NG) {
            with_const<Ops::kDirectMr>(mr, [&](auto MR) { micro_direct<MR, NG>(grp, gstride, k / kSpan, q, k, d); });
          });
        }
      }
    }
  }

  // ---- the table's entries

  static void dot_any(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
                      int64_t n0, int64_t n1, int32_t* out, int64_t ld, const Scale* sc) {
    if (m1 <= m0 || n1 <= n0) return;
    if (m1 - m0 >= Ops::kBufferedMinM)
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

  static size_t packed_bytes(int64_t n, int64_t k) { return panel_bytes(n, k, G); }
  static void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) { repack_panels<G>(i2s, n, k, packed); }
};

// The Ops of the VNNI kernels (avxvnni.cc: ymm, avx512vnni.cc: zmm, in each family): vpdpbusd adds the four
// u8 x s8 products of each int32 lane to it, so the sums need no widening and no chunking.
template <class V>
struct VnniOps {
  static constexpr bool kZmm = V::kBytes == 64;
  static constexpr bool kInt32Steps = true;
  static constexpr int64_t kChunkQuads = int64_t{1} << 40;
  static constexpr int kNg = 2;
  static constexpr int kMr = kZmm ? 12 : 6;  // x 2 groups: 24 accumulators of the 32 zmm, 12 of the 16 ymm
  static constexpr int kDirectMr = kZmm ? 4 : 3, kDirectNg = kZmm ? 4 : 2;
  static constexpr int kSingleNg = kZmm ? 3 : 2;  // one token: 3 x 16 rows measured ~20% faster than 4 on Zen 4
  static constexpr int64_t kKc = (int64_t{32} << 10) / (kNg * V::kInt32Lanes);  // unpacked codes: 32 KB of L1
  static constexpr int64_t kBufferedMinM = V::kInt32Lanes;
  static typename V::I step(typename V::I acc, typename V::I codes, typename V::I x) { return V::dpbusd(acc, codes, x); }
  static typename V::I widen(typename V::I acc) { return acc; }
};

// Products come from vpmaddubsw (u8 codes c <= 2 x s8 activations -> int16 pair sums in
// [-512, 508]) added in int16 with vpaddw; every 64 quads (sums in [-32768, 32512]: int16's least
// value only when every activation is -128 against code 2) vpmaddwd against ones widens them into
// int32. That is one multiply-port op per 64 products instead of two for vpmaddubsw + vpmaddwd every
// step (every 32 quads, the widening was 2-3% of the kernel's time on Zen 4: panel_profile.py).
struct Avx2Ops {
  using Ymm = simd::Ymm;
  static constexpr bool kInt32Steps = false;
  static constexpr int64_t kChunkQuads = 64;
  static constexpr int kMr = 3;  // 3 tokens x 2 groups: int16 + int32 sums fill the 16 ymm registers
  static constexpr int kNg = 2;
  static constexpr int kDirectMr = 3, kDirectNg = 2, kSingleNg = 2;  // kSingleNg unused: int16 steps
  static constexpr int64_t kKc = 2048;  // 2 groups x 8 rows x 2 KB of unpacked codes = 32 KB of L1
  static constexpr int64_t kBufferedMinM = 8;
  static Ymm::I step(Ymm::I acc, Ymm::I codes, Ymm::I x) { return Ymm::add16(Ymm::maddubs16(codes, x), acc); }
  static Ymm::I widen(Ymm::I acc) { return Ymm::madd16(acc, Ymm::words(1)); }
};

// The table of a kernel that is PanelDot<V, Ops> with `quantize` (the base family's quantizer of
// width V; null in every other family, family.h).
template <class V, class Ops>
constexpr I2SKernel panel_kernel(const char* name, QuantizeFn quantize) {
  using Dot = PanelDot<V, Ops>;
  return {name, Dot::packed_bytes, Dot::repack, quantize, Dot::dot,
          /*tile_m=*/256, /*tile_n=*/256, Dot::dot_scaled, /*min_tile_n=*/64, panel_layout(Dot::G)};
}

}  // namespace
}  // namespace bitnet_onnx::i2s_panel::x86
