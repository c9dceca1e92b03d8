// Shared by neon.cc (plain NEON), neon_dotprod.cc (+dotprod) and neon_i8mm.cc (+i8mm): the I2_S
// decode and the direct (decode in registers) token x row tiling of dot(). Everything here has
// internal linkage on purpose: the files are compiled with different -march flags, and a shared
// inline symbol could make the linker keep the dotprod copy for the plain path (SIGILL on CPUs
// without dotprod).
#pragma once

#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>
#include <cstdint>

#include "mul_kernels.h"

namespace bitnet_onnx::i2s::mul {
namespace {

constexpr int64_t kNeonBlock = 128;      // values per I2_S block
constexpr int64_t kNeonBlockBytes = 32;  // bytes per I2_S block
constexpr int kTileTokens = 4;           // tokens sharing one decoded weight vector

// The 2-bit codes of value 16v .. 16v+15 of a 128-value block as int8 ternary values. Byte p of
// a block holds values p, p+32, p+64, p+96 in bits 7-6, 5-4, 3-2, 1-0, so `lo` (bytes 0..15)
// holds v = 0, 2, 4, 6 and `hi` (bytes 16..31) v = 1, 3, 5, 7. Codes are 0..2 here (repack
// maps 0b11 to 0b01), so value = code - 1.
inline int8x16_t decode(uint8x16_t lo, uint8x16_t hi, int v) {
  const uint8x16_t bytes = (v & 1) ? hi : lo;
  const int8x16_t right = vdupq_n_s8(static_cast<int8_t>(-(6 - 2 * (v >> 1))));
  const uint8x16_t code = vandq_u8(vshlq_u8(bytes, right), vdupq_n_u8(3));
  return vsubq_s8(vreinterpretq_s8_u8(code), vdupq_n_s8(1));
}

// T tokens x R output rows over all k: each weight vector is decoded once and used for the
// T tokens; the T*R accumulators are independent chains. Policy P supplies
// step(acc32, part16, w, q) (adds w . q of 16 values) and flush(acc32, part16) (end of a block,
// for policies that accumulate a block in int16).
template <class P, int T, int R>
void micro_tile(const int8_t* const* q, const uint8_t* const* w_rows, int64_t blocks, int32_t* out,
                int64_t ld) {
  int32x4_t acc[T][R];
  int16x8_t part[T][R];
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) acc[t][r] = vdupq_n_s32(0);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8x16_t lo[R], hi[R];
    for (int r = 0; r < R; ++r) {
      lo[r] = vld1q_u8(w_rows[r] + b * kNeonBlockBytes);
      hi[r] = vld1q_u8(w_rows[r] + b * kNeonBlockBytes + 16);
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) part[t][r] = vdupq_n_s16(0);
    for (int v = 0; v < 8; ++v) {
      int8x16_t qv[T];
      for (int t = 0; t < T; ++t) qv[t] = vld1q_s8(q[t] + b * kNeonBlock + 16 * v);
      for (int r = 0; r < R; ++r) {
        const int8x16_t w = decode(lo[r], hi[r], v);
        for (int t = 0; t < T; ++t) P::step(acc[t][r], part[t][r], w, qv[t]);
      }
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) P::flush(acc[t][r], part[t][r]);
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) out[t * ld + r] = vaddvq_s32(acc[t][r]);
}

// T tokens against rows [n0, n1): with few tokens, more rows per tile keep enough independent
// accumulators in flight.
template <class P, int T>
void token_group(const int8_t* const* q, const uint8_t* packed, int64_t row_bytes, int64_t blocks,
                 int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  constexpr int R = T <= 2 ? 4 : 2;
  const uint8_t* w_rows[R];
  int64_t j = n0;
  for (; j + R <= n1; j += R) {
    for (int r = 0; r < R; ++r) w_rows[r] = packed + (j + r) * row_bytes;
    micro_tile<P, T, R>(q, w_rows, blocks, out + (j - n0), ld);
  }
  for (; j < n1; ++j) {
    w_rows[0] = packed + j * row_bytes;
    micro_tile<P, T, 1>(q, w_rows, blocks, out + (j - n0), ld);
  }
}

// The dot() of the I2SKernel table for a policy P (see micro_tile): groups of up to
// kTileTokens tokens, each group's exact size a compile-time constant (no padded work at M = 1).
template <class P>
void tiled_dot(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
               int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  const int64_t row_bytes = k / 4;
  const int64_t blocks = k / kNeonBlock;
  for (int64_t i = m0; i < m1; i += kTileTokens) {
    const int64_t mt = std::min<int64_t>(kTileTokens, m1 - i);
    const int8_t* q[kTileTokens];
    for (int64_t t = 0; t < mt; ++t) q[t] = rows.q + (i + t) * k;
    int32_t* o = out + (i - m0) * ld;
    switch (mt) {
      case 4: token_group<P, 4>(q, packed, row_bytes, blocks, n0, n1, o, ld); break;
      case 3: token_group<P, 3>(q, packed, row_bytes, blocks, n0, n1, o, ld); break;
      case 2: token_group<P, 2>(q, packed, row_bytes, blocks, n0, n1, o, ld); break;
      default: token_group<P, 1>(q, packed, row_bytes, blocks, n0, n1, o, ld); break;
    }
  }
}

}  // namespace
}  // namespace bitnet_onnx::i2s::mul

#endif  // __aarch64__
