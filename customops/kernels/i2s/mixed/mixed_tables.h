// The co-issued kernel's loop (mixed_kernels.h has the design), written over a vector class V of
// simd/x86.h with int16 lanes and vpdpbusd (Zmm under the avx512vnni flags). Everything is in an
// anonymous namespace: the ISA file instantiates its own copy under its flags.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "family.h"
#include "i2s_lut/token_lanes.h"
#include "mixed_kernels.h"
#include "mixed_layout.h"

// Stage switches and counters for customops/tests/mixed_profile.cc, which compiles avx512vnni.cc (or
// avx512vnni_gfni.cc) with its own definitions to time the kernel with stages left out and count its work; in
// the library every stage runs and nothing is counted.
#ifndef BITNET_MIXED_RUN
#define BITNET_MIXED_RUN(stage) true
#define BITNET_MIXED_COUNT(counter, n) ((void)0)
#endif

namespace bitnet_onnx::i2s::mixed {
namespace {

inline uint32_t load_dword(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline uint64_t load_word(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// kMulRows rows on vpdpbusd, then kLutRows rows on lookups, in every step of kMulRows + kLutRows rows
// of a job's row range (the rows a range leaves after its last whole step run on lookups); a K block
// is mixed_layout.h's kBlockSpans spans of 16 columns. kGfni: the multiply rows cut their codes out of
// the bytes with V::crumb (GFNI; only a file compiled with -mgfni has it).
template <class V, int kMulRows, int kLutRows, bool kGfni>
struct MixedDot {
  using I = typename V::I;
  using Lanes = i2s_lut::TokenLanes<V>;
  static constexpr int T = Lanes::T;  // tokens per block: an int16 lane (lookups) or 2 x an int32 lane (vpdpbusd) each
  static constexpr int H = Lanes::H;
  static constexpr int64_t kSpan = 16;  // columns per span
  static constexpr int kGroups = 4 * kBlockSpans;        // tables per K block (4 per span)
  // The int16 bound: an entry is at most 4 x 128 = 512 in magnitude and a lookup row adds kGroups = 8
  // per K block, widened every kBlocksPerWiden = 63 / 8 = 7 blocks: 56 x 512 = 28672 <= 32767
  // (kernel_test's --extreme-k cases run all-extreme activations through every widening).
  static constexpr int kBlocksPerWiden = i2s_lut::kMaxInt16Groups / kGroups;
  static_assert(kBlocksPerWiden >= 1, "a K block must not hold more groups than int16 sums allow");
  static constexpr int kStep = kMulRows + kLutRows;
  static constexpr int64_t kEpilogueRows = H * kStep;  // rows per chunk of the last block: whole steps, whole H
  static constexpr int64_t kEntryBytes = T * 2;  // 64 (zmm: a cache line) or 32 (ymm)
  static constexpr int kEntryShift = __builtin_ctzll(kEntryBytes);
  static_assert(kEntryBytes == int64_t{1} << kEntryShift, "table entries of a power of two bytes");
  // A table holds entries 0 .. 170 (a byte of 4 fields in {0, 1, 2}), 81 of them live. The zmm tables
  // are kTableLines cache lines apart rather than 171: the live entries of one table fall in 27 of L1's
  // 64 sets (3 lines each), so tables at a stride of a multiple of 64 lines would pile 3 x kGroups lines
  // into those sets; a stride of 217 lines spreads the 8 tables' at most 12 lines a set (a search over
  // strides 171-240). The ymm tables (half a line an entry) keep the same stride.
  static constexpr int64_t kTableLines = 217;
  static constexpr int64_t kTableBytes = kTableLines * 64;

  struct Phase {
    bool first;        // first K block: multiply rows start at -qsum
    bool from_zero;    // first block since the last widening: int16 sums start at 0
    bool widen;        // add the int16 sums into the int32 ones (and restart)
    bool first_widen;  // the int32 sums start here (store, not add)
  };

  // Table j of a span from the activation dwords x[s] (tokens [0, H) and [H, T)) of its 4 quads:
  // entry f0 + 4 f1 + 16 f2 + 64 f3 = sum_s (f_s - 1) * byte j of x[s].
  template <int j>
  static void build_table(const I (&x)[4][2], char* table) {
    I low[9], high[9];
    Lanes::combos(Lanes::template activation<j>(x[0][0], x[0][1]), Lanes::template activation<j>(x[1][0], x[1][1]), low);
    Lanes::combos(Lanes::template activation<j>(x[2][0], x[2][1]), Lanes::template activation<j>(x[3][0], x[3][1]), high);
    #pragma GCC unroll 9
    for (int c = 0; c < 9; ++c)
      #pragma GCC unroll 9
      for (int p = 0; p < 9; ++p) {
        const int entry = (p % 3 + 4 * (p / 3)) + 16 * (c % 3 + 4 * (c / 3));
        V::store(table + entry * kEntryBytes, V::add16(low[p], high[c]));
      }
  }

  // One K block's tables (kGroups, table 4 * span + j) and its activation dwords for the multiply
  // rows (x[4 * span + s][half]: quad s of the span, tokens [0, H) or [H, T)), from one gather each.
  static void build_block(const int8_t* q, int64_t ldq, int count, char* tables, I (&x)[4 * kBlockSpans][2]) {
    #pragma GCC unroll 4
    for (int sp = 0; sp < kBlockSpans; ++sp) {
      I xs[4][2];
      #pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int8_t* at = q + sp * kSpan + 4 * s;
        const bool gather = BITNET_MIXED_RUN(gathers);
        xs[s][0] = gather ? V::gather32(at, ldq, std::min(count, H)) : V::zero();
        xs[s][1] = gather ? V::gather32(count > H ? at + H * ldq : at, ldq, std::max(0, count - H)) : V::zero();
        x[4 * sp + s][0] = xs[s][0];
        x[4 * sp + s][1] = xs[s][1];
      }
      char* t = tables + 4 * sp * kTableBytes;
      BITNET_MIXED_COUNT(table_entries, 4 * 81);
      if (!BITNET_MIXED_RUN(tables)) continue;
      build_table<0>(xs, t);
      build_table<1>(xs, t + kTableBytes);
      build_table<2>(xs, t + 2 * kTableBytes);
      build_table<3>(xs, t + 3 * kTableBytes);
    }
  }

  // The codes of quad s of a multiply row's dword b (bits 2s, 2s + 1 of every byte) in bits 0-1. The
  // lookups' vpaddw and the multiply rows' work share the vector pipes, so one GFNI instruction instead
  // of a shift and a mask lets more of the lookups run alongside: 1.03-1.10x the kernel's speed on
  // Zen 4 (BENCHMARKS.md, "The co-issued kernel stage by stage").
  template <int s>
  static I codes(I b, I mask3) {
    if constexpr (s == 0)
      return V::and_(b, mask3);
    else if constexpr (kGfni)
      return V::template crumb<s>(b);
    else
      return V::and_(V::srli16(b, 2 * s), mask3);
  }

  // Byte j of a row's word of a block (its table index) times the entry size.
  template <int j>
  static size_t entry_offset(uint64_t word) {
    return i2s_lut::scaled_byte<kEntryShift>(word, j);
  }

  // One step: MR multiply rows then LR lookup rows, rows [row, row + MR + LR) of the job (local index r
  // into acc16 / acc32), over one K block. All of the step's instructions sit in one loop body so the
  // core can issue the vpdpbusd and the lookups together.
  template <int MR, int LR>
  [[gnu::always_inline]] static inline void step(const uint8_t* rows_at, const char* tables,
                   const I (&x)[4 * kBlockSpans][2], const I (&negq)[2], int16_t* acc16, int32_t* acc32, Phase ph) {
    BITNET_MIXED_COUNT(mul_macs, MR * T * kBlockCols);  // the block's token lanes, padding included
    BITNET_MIXED_COUNT(lookup_macs, LR * T * kBlockCols);
    const bool multiply = BITNET_MIXED_RUN(multiplies), look_up = BITNET_MIXED_RUN(lookups);
    I lo[MR > 0 ? MR : 1], hi[MR > 0 ? MR : 1], acc[LR > 0 ? LR : 1];
    #pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      lo[m] = ph.first ? negq[0] : V::load(acc32 + m * T);
      hi[m] = ph.first ? negq[1] : V::load(acc32 + m * T + H);
    }
    #pragma GCC unroll 8
    for (int l = 0; l < LR; ++l) acc[l] = ph.from_zero ? V::zero() : V::load(acc16 + (MR + l) * T);
    uint64_t w[LR > 0 ? LR : 1];
    #pragma GCC unroll 8
    for (int l = 0; l < LR; ++l) w[l] = load_word(rows_at + (MR + l) * kRowBlockBytes);
    const I mask3 = V::bytes(3);
    // span sp's 4 quads of the multiply rows alongside its tables j = 0..3 of the lookup rows
    auto span = [&](auto SP) {
      constexpr int sp = decltype(SP)::value;
      I b[MR > 0 ? MR : 1];
      #pragma GCC unroll 8
      for (int m = 0; m < MR; ++m) b[m] = V::dwords(static_cast<int32_t>(load_dword(rows_at + m * kRowBlockBytes + 4 * sp)));
      const char* t = tables + 4 * sp * kTableBytes;
      auto quad = [&](auto S) {
        constexpr int s = decltype(S)::value;
        if (multiply) {
          #pragma GCC unroll 8
          for (int m = 0; m < MR; ++m) {
            const I c = codes<s>(b[m], mask3);
            lo[m] = V::dpbusd(lo[m], c, x[4 * sp + s][0]);
            hi[m] = V::dpbusd(hi[m], c, x[4 * sp + s][1]);
          }
        }
        if (look_up) {
          #pragma GCC unroll 8
          for (int l = 0; l < LR; ++l)
            acc[l] = V::add16(acc[l], V::load(t + s * kTableBytes + entry_offset<4 * sp + s>(w[l])));
        }
      };
      quad(std::integral_constant<int, 0>{});
      quad(std::integral_constant<int, 1>{});
      quad(std::integral_constant<int, 2>{});
      quad(std::integral_constant<int, 3>{});
    };
    static_assert(kBlockSpans == 2, "two spans per K block (mixed_layout.h)");
    span(std::integral_constant<int, 0>{});
    span(std::integral_constant<int, 1>{});
    #pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      V::store(acc32 + m * T, lo[m]);
      V::store(acc32 + m * T + H, hi[m]);
    }
    #pragma GCC unroll 8
    for (int l = 0; l < LR; ++l) {
      if (ph.widen && BITNET_MIXED_RUN(widen))
        Lanes::widen(acc[l], acc32 + (MR + l) * T, ph.first_widen);
      else
        V::store(acc16 + (MR + l) * T, acc[l]);
    }
  }

  // Rows [r0, r0 + rows) of the job (r0 a multiple of kStep) over one K block.
  static void sweep(const uint8_t* block_at, int64_t n0, int64_t r0, int64_t rows,
                    const char* tables, const I (&x)[4 * kBlockSpans][2], const I (&negq)[2], int16_t* acc16,
                    int32_t* acc32, Phase ph) {
    // the activation dwords in registers for the whole sweep (the lookups are bound by loads: the
    // multiply rows must not add one per vpdpbusd)
    I xr[4 * kBlockSpans][2];
    #pragma GCC unroll 8
    for (int u = 0; u < 4 * kBlockSpans; ++u) xr[u][0] = x[u][0], xr[u][1] = x[u][1];
    int64_t r = r0;
    for (; r + kStep <= r0 + rows; r += kStep)
      step<kMulRows, kLutRows>(block_at + (n0 + r) * kRowBlockBytes, tables, xr, negq, acc16 + r * T, acc32 + r * T, ph);
    for (; r < r0 + rows; ++r)
      step<0, 1>(block_at + (n0 + r) * kRowBlockBytes, tables, xr, negq, acc16 + r * T, acc32 + r * T, ph);
  }

  // One block of up to T tokens starting at i0 against rows [n0, n1); out row (i0 - m0).
  static void token_block(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t i0, int count,
                          int64_t m0, int64_t n0, int64_t n1, int32_t* out, int64_t ld, const float* a, float s_w) {
    const int64_t nr = n1 - n0;
    const typename Lanes::Buffers buf = Lanes::buffers(kGroups * kTableBytes, nr);
    char* tables = static_cast<char*>(buf.tables);
    int16_t* acc16 = buf.acc16;
    int32_t* acc32 = buf.acc32;
    const int8_t* q = rows.q + i0 * k;
    // multiply rows start at -qsum of their token (lanes past count: never stored)
    const I negq[2] = {V::sub32(V::zero(), V::maskload32(rows.qsum + i0, V::lane_mask(0, 0, count))),
                       count > H ? V::sub32(V::zero(), V::maskload32(rows.qsum + i0 + H, V::lane_mask(1, 0, count)))
                                 : V::zero()};
    const int64_t blocks = k / kBlockCols;  // k % 128 == 0: whole blocks
    static_assert(128 % kBlockCols == 0, "K blocks tile an I2_S block");
    for (int64_t b = 0; b < blocks; ++b) {
      alignas(64) I x[4 * kBlockSpans][2];
      build_block(q + b * kBlockCols, k, count, tables, x);
      const Phase ph{b == 0, b % kBlocksPerWiden == 0, b % kBlocksPerWiden == kBlocksPerWiden - 1 || b == blocks - 1,
                     b < kBlocksPerWiden};
      const uint8_t* at = packed + b * n * kRowBlockBytes;
      if (b + 1 < blocks) {
        sweep(at, n0, 0, nr, tables, x, negq, acc16, acc32, ph);
        continue;
      }
      // Last block: each chunk of rows goes to the output right after its last sweep (as the lookup
      // kernels do: the output's cache misses overlap the work).
      for (int64_t j = 0; j < nr; j += kEpilogueRows) {
        const int64_t rows_here = std::min(kEpilogueRows, nr - j);
        if (BITNET_MIXED_RUN(prefetch)) Lanes::prefetch_out(out + j, rows_here, count, i0 - m0, ld);
        sweep(at, n0, j, rows_here, tables, x, negq, acc16, acc32, ph);
        if (BITNET_MIXED_RUN(emit))
          Lanes::epilogue(acc32 + j * T, rows_here, count, i0 - m0, out + j, ld, a ? a + i0 : nullptr, s_w);
      }
    }
  }
};

// The kernel's table over its token-block widths (i2s_lut::TokenBlocks: Wide for full blocks, Narrow for
// a last block that fits it) and the family's own layout (mixed_layout.h).
template <class Wide, class Narrow>
constexpr I2SKernel mixed_kernel(const char* name) {
  using Entries = i2s_lut::TokenBlocks<Wide, Narrow>;
  return {name, mixed::packed_bytes, mixed::repack, /*quantize=*/nullptr, Entries::dot, /*tile_m=*/Wide::T,
          /*tile_n=*/4096, Entries::dot_scaled, /*min_tile_n=*/512};
}

}  // namespace
}  // namespace bitnet_onnx::i2s::mixed
