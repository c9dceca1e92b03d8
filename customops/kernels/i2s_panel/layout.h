// The "panel" weight layout of the x86 multiply kernels (i2s/mul/: avx2, avxvnni, avx512vnni, amx;
// i2s/mul_direct/), plain C++ so that every architecture builds a family's scalar reference over it.
// Shared by the families that run it (a family never includes another's files): linking
// kernel_i2s_panel (kernels/CMakeLists.txt) is how a family says it does. Everything sits in an
// anonymous namespace so that each ISA's translation unit, compiled with its own -m flags, keeps a
// private copy (no ODR merging of an AVX-512 build of a helper into the AVX2 path).
#pragma once

#include <cstddef>
#include <cstdint>

namespace bitnet_onnx::i2s_panel {
namespace {

constexpr int64_t kI2sBlock = 128;      // values per I2_S block
constexpr int64_t kI2sBlockBytes = 32;  // bytes per I2_S block
constexpr int64_t kSpan = 16;           // columns covered by one packed 4G-byte vector

// Rows are grouped by G (16 for zmm, 8 for ymm); a group stores, for each span of 16 columns, 4G
// bytes where byte 4r+j holds in bits 2s..2s+1 the code of row G*g+r at column 16*span+4s+j. One
// vector load thus yields, after a shift by 2s and a mask, the vpdpbusd operand "G rows x 4
// consecutive k" for quad s. Codes are the ternary value + 1; I2_S's 0b11 is stored as 0b01
// (reads as 0); padding rows are 0b01 too, so they contribute nothing.
inline int64_t panel_groups(int64_t n, int64_t g) { return (n + g - 1) / g; }
inline int64_t group_stride(int64_t k, int64_t g) { return g * k / 4; }  // bytes per group

// I2SKernel::layout of a kernel over G-row panels: every such kernel of an ISA reads the same bytes.
constexpr const char* panel_layout(int64_t g) { return g == 16 ? "panel16" : g == 8 ? "panel8" : nullptr; }

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

// The code of row `row`, column c in a panel layout of G-row groups (repack_panels' inverse, for
// references): the byte of quad s = (c % 16) / 4 and column j = c % 4 of its span, field s.
inline uint8_t panel_code(const uint8_t* packed, int64_t k, int64_t g, int64_t row, int64_t c) {
  const int64_t r = row % g, within = c % kSpan;
  const uint8_t byte = packed[(row / g) * group_stride(k, g) + (c / kSpan) * 4 * g + 4 * r + within % 4];
  return (byte >> (2 * (within / 4))) & 3;
}

// Row `row`'s ternary values t[0, k) read back from a layout of G-row panel groups (for references:
// plain, not fast).
inline void panel_row(const uint8_t* packed, int64_t k, int64_t g, int64_t row, int8_t* t) {
  for (int64_t c = 0; c < k; ++c) t[c] = static_cast<int8_t>(panel_code(packed, k, g, row, c) - 1);
}

}  // namespace
}  // namespace bitnet_onnx::i2s_panel
