// The lookup kernels' loops (lut_kernels.h has the design), written once over a vector class V
// that supplies the int16 / int32 lane operations (simd/x86.h: Ymm, Zmm; lut_neon.cc: Neon16).
// Everything is in an anonymous namespace: each ISA file instantiates its own copy with its own
// flags (no ODR merging of an AVX-512 instantiation into the AVX2 kernel).
//
// The token lanes, the table's partial sums, the widening and the epilogue are kernels/i2s_lut/
// token_lanes.h's (shared with the mixed family); what V provides is listed there, plus
// gather32(base, stride, count) (dword lanes i < count from base + i * stride, others 0).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "family.h"
#include "i2s_lut/token_lanes.h"
#include "lut_kernels.h"
#include "lut_layout.h"
#include "simd/vector_math.h"
#include "with_const.h"

namespace bitnet_onnx::i2s::lut {
namespace {

// One token-block width V over the layout of kBlockGroups groups per K block.
template <class V, int kBlockGroups>
struct LutDot {
  using I = typename V::I;
  using Lanes = i2s_lut::TokenLanes<V>;
  static constexpr int T = Lanes::T;  // tokens per block: one per int16 lane
  static constexpr int H = Lanes::H;  // int32 lanes
  static constexpr int64_t kEntryBytes = T * 2;
  static constexpr int64_t kTableBytes = kPatterns * kEntryBytes;
  static constexpr int kBlocksPerWiden = kMaxInt16Groups / kBlockGroups;
  static_assert(kBlocksPerWiden >= 1, "a K block must not hold more groups than int16 sums allow");
  static constexpr int kRows = 4;  // rows per step of the sweep: independent vpaddw chains
  static constexpr int64_t kEpilogueRows = 32;  // rows per chunk of the last block (a multiple of H)

  // The 81 entries of one group: entry p = sum_t (digit t of p in base 3, minus 1) * x_t, built
  // from 9 + 9 partial sums by one add each.
  static void build_table(const int8_t* q, int64_t ldq, int count, int16_t* table) {
    const I lo = V::gather32(q, ldq, std::min(count, H));
    const I hi = V::gather32(count > H ? q + H * ldq : q, ldq, std::max(0, count - H));
    I low[9], high[9];
    Lanes::combos(Lanes::template activation<0>(lo, hi), Lanes::template activation<1>(lo, hi), low);
    Lanes::combos(Lanes::template activation<2>(lo, hi), Lanes::template activation<3>(lo, hi), high);
    #pragma GCC unroll 9
    for (int c = 0; c < 9; ++c)
      #pragma GCC unroll 9
      for (int p = 0; p < 9; ++p) V::store(table + (9 * c + p) * T, V::add16(low[p], high[c]));
  }

  // A row's pattern bytes are read 8 at a time when a K block holds a multiple of 8 groups, each entry's
  // offset cut out of its word (i2s_lut::scaled_byte; lut-avx512 and lut-avx2 on Zen 4: 10-20% less time
  // than a byte load each, BENCHMARKS.md). lut-neon's 12 groups load bytes.
  static constexpr int kEntryShift = __builtin_ctzll(kEntryBytes);
  static_assert(kEntryBytes == int64_t{1} << kEntryShift, "table entries of a power of two bytes");

  // Group c's table entry offset (pattern x kEntryBytes) for row r of the block.
  template <int GB, int R>
  static size_t entry_offset(const uint8_t* idx, const uint64_t (&words)[R][GB / 8 + 1], int r, int c) {
    if constexpr (GB % 8 != 0) return static_cast<size_t>(idx[r * GB + c]) * kEntryBytes;
    return i2s_lut::scaled_byte<kEntryShift>(words[r][c / 8], c % 8);
  }

  // How a sweep starts and ends its rows' int16 sums (see lut_kernels.h).
  struct Phase {
    bool from_zero;    // first block since the last widening: sums start at 0
    bool widen;        // add the int16 sums into the int32 ones (and restart)
    bool first_widen;  // the int32 sums start here (store, not add)
  };

  template <int R, int GB>
  static void sweep_rows(const uint8_t* idx, const int16_t* tables, int16_t* acc16, int32_t* acc32, Phase ph) {
    I acc[R];
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = ph.from_zero ? V::zero() : V::load(acc16 + r * T);
    // Byte offsets in size_t (table c's offset is the vpaddw's displacement), no sign extension.
    const char* base = reinterpret_cast<const char*>(tables);
    uint64_t words[R][GB / 8 + 1];
    if constexpr (GB % 8 == 0) {
      #pragma GCC unroll 4
      for (int r = 0; r < R; ++r) std::memcpy(words[r], idx + r * GB, GB);
    }
    #pragma GCC unroll 16
    for (int c = 0; c < GB; ++c)
      #pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        acc[r] = V::add16(acc[r], V::load(base + c * kTableBytes + entry_offset<GB>(idx, words, r, c)));
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (!ph.widen) {
        V::store(acc16 + r * T, acc[r]);
        continue;
      }
      Lanes::widen(acc[r], acc32 + r * T, ph.first_widen);
    }
  }

  // Rows [0, rows) of one K block of GB groups.
  template <int GB>
  static void sweep(const uint8_t* idx, int64_t rows, const int16_t* tables, int16_t* acc16, int32_t* acc32,
                    Phase ph) {
    int64_t r = 0;
    for (; r + kRows <= rows; r += kRows)
      sweep_rows<kRows, GB>(idx + r * GB, tables, acc16 + r * T, acc32 + r * T, ph);
    for (; r < rows; ++r) sweep_rows<1, GB>(idx + r * GB, tables, acc16 + r * T, acc32 + r * T, ph);
  }

  // One block of up to T tokens starting at i0 against rows [n0, n1); out row (i0 - m0).
  static void token_block(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t i0,
                          int count, int64_t m0, int64_t n0, int64_t n1, int32_t* out, int64_t ld, const float* a,
                          float s_w) {
    const int64_t nr = n1 - n0;
    const typename Lanes::Buffers buf = Lanes::buffers(kBlockGroups * kTableBytes, nr);
    int16_t* tables = static_cast<int16_t*>(buf.tables);
    int16_t* acc16 = buf.acc16;
    int32_t* acc32 = buf.acc32;
    const int8_t* q = rows.q + i0 * k;
    const int64_t blocks = blocks_of(k, kBlockGroups);
    for (int64_t b = 0; b < blocks; ++b) {
      const int gb = static_cast<int>(block_width(k, kBlockGroups, b));
      for (int c = 0; c < gb; ++c)
        build_table(q + (b * kBlockGroups + c) * kGroup, k, count, tables + c * (kTableBytes / 2));
      const Phase ph{b % kBlocksPerWiden == 0, b % kBlocksPerWiden == kBlocksPerWiden - 1 || b == blocks - 1,
                     b < kBlocksPerWiden};
      const uint8_t* idx = packed + n * kBlockGroups * b + n0 * gb;
      if (b + 1 < blocks) {
        with_const<kBlockGroups>(gb, [&](auto GB) { sweep<GB>(idx, nr, tables, acc16, acc32, ph); });
        continue;
      }
      // Last block: each chunk of rows goes to the output right after its last sweep, so that the
      // output's cache misses overlap the lookups (all at the end, they cost 15% at M = 128).
      for (int64_t j = 0; j < nr; j += kEpilogueRows) {
        const int64_t rows_here = std::min(kEpilogueRows, nr - j);
        Lanes::prefetch_out(out + j, rows_here, count, i0 - m0, ld);
        with_const<kBlockGroups>(gb, [&](auto GB) {
          sweep<GB>(idx + j * gb, rows_here, tables, acc16 + j * T, acc32 + j * T, ph);
        });
        Lanes::epilogue(acc32 + j * T, rows_here, count, i0 - m0, out + j, ld, a ? a + i0 : nullptr, s_w);
      }
    }
  }
};

// A kernel over its token-block widths (i2s_lut::TokenBlocks: Wide for full blocks, Narrow (if
// distinct) for a last block that fits it).
template <int kBlockGroups, class Wide, class Narrow>
struct LutKernel {
  using WideDot = LutDot<Wide, kBlockGroups>;
  using NarrowDot = LutDot<Narrow, kBlockGroups>;

  static size_t packed_size(int64_t n, int64_t k) { return packed_bytes(n, k); }
  static void repack_groups(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) {
    repack(i2s, n, k, kBlockGroups, packed);
  }

  // The kernel's table: jobs of one wide token block (no quantizer: the family's kernels leave it
  // to the driver's, family.h).
  static constexpr I2SKernel table(const char* name) {
    using Entries = i2s_lut::TokenBlocks<WideDot, NarrowDot>;
    return {name, packed_size, repack_groups, /*quantize=*/nullptr, Entries::dot,
            /*tile_m=*/WideDot::T, /*tile_n=*/4096, Entries::dot_scaled, /*min_tile_n=*/512};
  }
};

}  // namespace
}  // namespace bitnet_onnx::i2s::lut
