// The lookup family's weight layout (pattern indices), shared by every ISA of kernels/i2s/lut/.
//
// A group is 4 consecutive ternary weights of a row, w[4c .. 4c+3] (K is a multiple of 128, so
// no row has a partial group). Its pattern index is
//   p = (w0 + 1) + 3 (w1 + 1) + 9 (w2 + 1) + 27 (w3 + 1)  in [0, 81),
// one byte per group: the packed matrix is exactly as large as I2_S (2 bits per weight).
// Negating every weight maps p to 80 - p (unused by the kernels, kept as a test invariant).
//
// Bytes are ordered for the kernels' loop: K is cut into blocks of `block_groups` groups (the
// tables of one block stay in L1 while every output row reads them); block b holds, for every row
// j in [0, n), that row's gb(b) pattern bytes, contiguous:
//   offset(b, j, c) = n * block_groups * b + gb(b) * j + c,   gb(b) = min(block_groups, groups - b*block_groups)
// so a kernel sweeping the rows of one block reads one sequential stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bitnet_onnx::i2s::lut {

constexpr int kGroup = 4;          // ternary weights per pattern
constexpr int kPatterns = 81;      // 3^kGroup
constexpr int64_t kI2sBlock = 128;  // values per I2_S block (32 bytes)

inline int64_t groups_of(int64_t k) { return k / kGroup; }
inline int64_t blocks_of(int64_t k, int block_groups) { return (groups_of(k) + block_groups - 1) / block_groups; }
inline int64_t block_width(int64_t k, int block_groups, int64_t b) {
  const int64_t rest = groups_of(k) - b * block_groups;
  return rest < block_groups ? rest : block_groups;
}
inline size_t packed_bytes(int64_t n, int64_t k) { return static_cast<size_t>(n) * static_cast<size_t>(groups_of(k)); }

// I2_S: in a 32-byte block of 128 values, byte p holds values p (bits 7:6), p + 32, p + 64 and
// p + 96 (bits 1:0); codes 0, 1, 2 are -1, 0, +1 and the never-written code 3 reads as 0, as in the
// multiply kernels.
// I2_S bytes [n, k/4] -> pattern bytes in the block order above (once per constant W: one row
// decoded at a time, then its groups scattered to their blocks).
inline void repack(const uint8_t* i2s, int64_t n, int64_t k, int block_groups, uint8_t* packed) {
  static const uint8_t kPlusOne[4] = {0, 1, 2, 1};
  const int64_t row_bytes = k / 4;
  std::vector<uint8_t> plus_one(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = i2s + j * row_bytes;
    for (int64_t blk = 0; blk < k / kI2sBlock; ++blk)
      for (int p = 0; p < 32; ++p) {
        const uint8_t byte = row[blk * 32 + p];
        for (int s = 0; s < 4; ++s) plus_one[blk * kI2sBlock + 32 * s + p] = kPlusOne[(byte >> (6 - 2 * s)) & 3];
      }
    for (int64_t b = 0; b < blocks_of(k, block_groups); ++b) {
      const int64_t gb = block_width(k, block_groups, b);
      uint8_t* dst = packed + n * block_groups * b + gb * j;
      for (int64_t c = 0; c < gb; ++c) {
        const uint8_t* w = plus_one.data() + (b * block_groups + c) * kGroup;
        dst[c] = static_cast<uint8_t>(w[0] + 3 * w[1] + 9 * w[2] + 27 * w[3]);
      }
    }
  }
}

// The pattern byte of (row j, group c) of a packed matrix.
inline uint8_t pattern_at(const uint8_t* packed, int64_t n, int64_t k, int block_groups, int64_t j, int64_t c) {
  const int64_t b = c / block_groups;
  return packed[n * block_groups * b + block_width(k, block_groups, b) * j + c % block_groups];
}

}  // namespace bitnet_onnx::i2s::lut
