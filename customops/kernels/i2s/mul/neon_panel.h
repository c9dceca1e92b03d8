// Shared by neon_dotprod.cc (+dotprod) and neon_i8mm.cc (+i8mm): dot() over a buffered panel, as
// the x86 buffered path does (i2s_panel/x86_dot.h). Per panel of R output rows and K block, the 2-bit
// codes are decoded once into an L1 buffer of int8 values; then every token tile of the call runs load +
// multiply over it, where the direct path (neon_tile.h) decodes again for every 4-token group.
// Internal linkage on purpose, for the reason neon_tile.h gives.
//
// Buffer layout: 16-value chunk c of the K block occupies bytes [c * 16R, (c + 1) * 16R).
//  - Rows (SDOT):       row r's 16 values at offset 16r;
//  - RowPairs (SMMLA):  for row pair p (rows 2p, 2p+1), the first 8 values of both rows at offset
//                       16p and the last 8 at 8R + 16p: each 16 bytes are the 2x8 operand of SMMLA.
// Rows at or past the call's n1 are zeros in the buffer (never read from the weights).
#pragma once

#if defined(__aarch64__)
#include "neon_tile.h"

namespace bitnet_onnx::i2s::mul {
namespace {

// Decoded codes of one panel and K block: 16 KB, a quarter of the L1D of Neoverse N1/N2/V1/V2.
constexpr int64_t kPanelBytes = 16384;

struct Rows {
  template <int R>
  static inline void store(const int8x16_t (&w)[R], int8_t* dst) {
    for (int r = 0; r < R; ++r) vst1q_s8(dst + 16 * r, w[r]);
  }
};

struct RowPairs {
  template <int R>
  static inline void store(const int8x16_t (&w)[R], int8_t* dst) {
    static_assert(R % 2 == 0, "row pairs");
    for (int p = 0; p < R / 2; ++p) {
      const int64x2_t a = vreinterpretq_s64_s8(w[2 * p]), b = vreinterpretq_s64_s8(w[2 * p + 1]);
      vst1q_s8(dst + 16 * p, vreinterpretq_s8_s64(vzip1q_s64(a, b)));
      vst1q_s8(dst + 8 * R + 16 * p, vreinterpretq_s8_s64(vzip2q_s64(a, b)));
    }
  }
};

// Values [k0, k0 + kc) of rows [0, valid) of `w` (row stride row_bytes) into `panel` in Layout's
// order; rows [valid, R) are zeros. k0 and kc are multiples of kNeonBlock. kValid: valid as a
// compile-time constant (R: a whole panel, the branch-free loop every panel but the last runs).
template <class Layout, int R, int kValid>
void unpack_rows(const uint8_t* w, int64_t row_bytes, int valid, int64_t k0, int64_t kc, int8_t* panel) {
  const int rows = kValid ? kValid : valid;
  const int8x16_t zero = vdupq_n_s8(0);
  for (int64_t b = 0; b < kc / kNeonBlock; ++b) {
    uint8x16_t lo[R], hi[R];
    for (int r = 0; r < rows; ++r) {
      const uint8_t* src = w + r * row_bytes + (k0 / kNeonBlock + b) * kNeonBlockBytes;
      lo[r] = vld1q_u8(src);
      hi[r] = vld1q_u8(src + 16);
    }
    #pragma GCC unroll 8  // constant shifts in decode (ushr by an immediate)
    for (int v = 0; v < 8; ++v) {
      int8x16_t vals[R];
      for (int r = 0; r < R; ++r) vals[r] = r < rows ? decode(lo[r], hi[r], v) : zero;
      Layout::template store<R>(vals, panel + (b * 8 + v) * 16 * R);
    }
  }
}

template <class Layout, int R>
void unpack_panel(const uint8_t* w, int64_t row_bytes, int valid, int64_t k0, int64_t kc, int8_t* panel) {
  if (valid == R)
    unpack_rows<Layout, R, R>(w, row_bytes, valid, k0, kc, panel);
  else
    unpack_rows<Layout, R, 0>(w, row_bytes, valid, k0, kc, panel);
}

// out[t * ld + r] (+)= sum for t < tokens, r < valid, from a tile's accumulators.
inline void store_sum(int32_t* out, bool accumulate, int32_t sum) { *out = accumulate ? *out + sum : sum; }

// dot() of a buffered path P: P::Layout, P::kRows (R), P::kTokens, and
//   P::tile(panel, chunks, q, ldq, tokens, valid, out, ld, accumulate)
// for `tokens` (1..kTokens) rows of q from q, ldq apart, over `chunks` 16-value chunks of the panel.
template <class P>
void panel_dot(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1, int64_t n0,
               int64_t n1, int32_t* out, int64_t ld) {
  constexpr int R = P::kRows;
  constexpr int64_t kKc = kPanelBytes / R / kNeonBlock * kNeonBlock;
  alignas(64) int8_t panel[kPanelBytes];
  const int64_t row_bytes = k / 4;
  for (int64_t j = n0; j < n1; j += R) {
    const int valid = static_cast<int>(std::min<int64_t>(R, n1 - j));
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kc = std::min(kKc, k - k0);
      unpack_panel<typename P::Layout, R>(packed + j * row_bytes, row_bytes, valid, k0, kc, panel);
      for (int64_t i = m0; i < m1; i += P::kTokens) {
        const int tokens = static_cast<int>(std::min<int64_t>(P::kTokens, m1 - i));
        P::tile(panel, kc / 16, rows.q + i * k + k0, k, tokens, valid, out + (i - m0) * ld + (j - n0), ld, k0 > 0);
      }
    }
  }
}

}  // namespace

// dot() with SDOT (neon_dotprod.cc, built with +dotprod); call only when the CPU has dotprod.
void neon_dotprod_dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows,
                      int64_t m0, int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld);
// dot() with SMMLA (neon_i8mm.cc, built with +dotprod+i8mm); call only when the CPU has both.
void neon_i8mm_dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows,
                   int64_t m0, int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld);

}  // namespace bitnet_onnx::i2s::mul

#endif  // __aarch64__
