// The mixed family's weight layout, read by both halves of its kernel (mixed_kernels.h) and by its
// reference. Plain C++.
//
// A K block is kBlockCols = 32 columns (2 spans of 16). Row j's 8 bytes of block b sit at
// (b * n + j) * 8: byte 4 sp + jj holds, in bits 2s .. 2s + 1, the code (ternary + 1; I2_S's never
// written 0b11 reads as 0, code 0b01) of column 32 b + 16 sp + 4 s + jj. These are the bytes of the
// 16-row panels (kernels/i2s_panel/layout.h: byte 4r + jj of a span), ordered block by block and row
// by row instead of panel by panel, so that a kernel sweeping every row of one K block reads one
// sequential stream (in panel order, consecutive 16-row groups are 4k bytes apart: a new page per
// group, which the hardware prefetchers do not follow; the lookups of the first version ran 1.5x
// lut-avx512's time over it). 2 bits per weight: as large as I2_S.
#pragma once

#include <cstddef>
#include <cstdint>

#include "i2s_panel/layout.h"

namespace bitnet_onnx::i2s::mixed {

constexpr int64_t kBlockSpans = 2;                   // spans of 16 columns per K block
constexpr int64_t kBlockCols = 16 * kBlockSpans;     // 32 (k % 128 == 0: whole blocks)
constexpr int64_t kRowBlockBytes = 4 * kBlockSpans;  // one row's bytes of a block: 8

inline size_t packed_bytes(int64_t n, int64_t k) { return static_cast<size_t>(n) * static_cast<size_t>(k / 4); }

// I2_S bytes [n, k/4] -> the layout above (once per constant W).
inline void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) {
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = i2s + j * (k / 4);
    for (int64_t b = 0; b < k / kBlockCols; ++b)
      for (int64_t sp = 0; sp < kBlockSpans; ++sp)
        for (int jj = 0; jj < 4; ++jj) {
          uint8_t byte = 0;
          for (int s = 0; s < 4; ++s)
            byte |= static_cast<uint8_t>(i2s_panel::i2s_code(row, b * kBlockCols + 16 * sp + 4 * s + jj) << (2 * s));
          packed[(b * n + j) * kRowBlockBytes + 4 * sp + jj] = byte;
        }
  }
}

// The code of row j, column c (repack's inverse, for the reference).
inline uint8_t code_at(const uint8_t* packed, int64_t n, int64_t j, int64_t c) {
  const int64_t b = c / kBlockCols, w = c % kBlockCols;
  const int64_t sp = w / 16, s = (w % 16) / 4, jj = w % 4;
  return (packed[(b * n + j) * kRowBlockBytes + 4 * sp + jj] >> (2 * s)) & 3;
}

}  // namespace bitnet_onnx::i2s::mixed
