// Shared by neon.cc (plain NEON) and neon_dotprod.cc (compiled with +dotprod): the I2_S block
// unpack and the token x row tiling of dot(). Everything here has internal linkage on purpose:
// the two files are compiled with different -march flags, and a shared inline symbol could make
// the linker keep the dotprod copy for the plain path (SIGILL on CPUs without dotprod).
#pragma once

#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>
#include <cstdint>

#include "i2s_kernel.h"

namespace bitnet_onnx {
namespace {

constexpr int64_t kNeonBlock = 128;      // values per I2_S block
constexpr int64_t kNeonBlockBytes = 32;  // bytes per I2_S block
constexpr int kTileRows = 2;             // output rows sharing one activation load
constexpr int kTileTokens = 4;           // tokens sharing one unpacked weight block

// One 32-byte I2_S block -> 8 vectors of ternary int8; w[v] holds values 16v .. 16v+15 of the
// block, so it pairs with the 16 activations at the same offset. Byte p holds values
// p, p+32, p+64, p+96 in bits 7-6, 5-4, 3-2, 1-0. Codes are 0..2 here (repack maps 0b11 to 0b01).
inline void unpack_block(const uint8_t* block, int8x16_t w[8]) {
  const uint8x16_t lo = vld1q_u8(block);       // values p = 0..15 of each 32-group
  const uint8x16_t hi = vld1q_u8(block + 16);  // values p = 16..31
  const uint8x16_t mask = vdupq_n_u8(3);
  const int8x16_t one = vdupq_n_s8(1);
  w[0] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(lo, 6)), one);
  w[1] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(hi, 6)), one);
  w[2] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(lo, 4), mask)), one);
  w[3] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(hi, 4), mask)), one);
  w[4] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(lo, 2), mask)), one);
  w[5] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(hi, 2), mask)), one);
  w[6] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(lo, mask)), one);
  w[7] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(hi, mask)), one);
}

// The dot() of the I2SKernel table for a block-dot policy: BlockDot::add(acc, w[8], q) adds
// sum_v w[v] . q[16v .. 16v+15] of one 128-value block into the int32x4 accumulator.
// Tiles of kTileTokens x kTileRows: each weight block is unpacked once per tile and used for
// every token of it; ragged edges repeat the last valid token/row (reads stay in bounds) and
// only valid results are stored.
template <class BlockDot>
void tiled_dot(const uint8_t* packed, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
               int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  const int64_t row_bytes = k / 4;
  const int64_t blocks = k / kNeonBlock;
  for (int64_t i = m0; i < m1; i += kTileTokens) {
    const int mt = static_cast<int>(std::min<int64_t>(kTileTokens, m1 - i));
    const int8_t* q[kTileTokens];
    for (int t = 0; t < kTileTokens; ++t) q[t] = rows.q + (i + std::min(t, mt - 1)) * k;
    for (int64_t j = n0; j < n1; j += kTileRows) {
      const int nr = static_cast<int>(std::min<int64_t>(kTileRows, n1 - j));
      const uint8_t* w_row[kTileRows];
      for (int r = 0; r < kTileRows; ++r) w_row[r] = packed + (j + std::min(r, nr - 1)) * row_bytes;
      int32x4_t acc[kTileRows][kTileTokens];
      for (int r = 0; r < kTileRows; ++r)
        for (int t = 0; t < kTileTokens; ++t) acc[r][t] = vdupq_n_s32(0);
      for (int64_t b = 0; b < blocks; ++b) {
        int8x16_t w[kTileRows][8];
        for (int r = 0; r < kTileRows; ++r) unpack_block(w_row[r] + b * kNeonBlockBytes, w[r]);
        for (int t = 0; t < kTileTokens; ++t) {
          const int8_t* qb = q[t] + b * kNeonBlock;
          for (int r = 0; r < kTileRows; ++r) acc[r][t] = BlockDot::add(acc[r][t], w[r], qb);
        }
      }
      for (int t = 0; t < mt; ++t)
        for (int r = 0; r < nr; ++r) out[(i + t - m0) * ld + (j + r - n0)] = vaddvq_s32(acc[r][t]);
    }
  }
}

}  // namespace

// dot() with SDOT (neon_dotprod.cc, built with +dotprod); call only when the CPU has dotprod.
void neon_dotprod_dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows,
                      int64_t m0, int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld);

}  // namespace bitnet_onnx

#endif  // __aarch64__
