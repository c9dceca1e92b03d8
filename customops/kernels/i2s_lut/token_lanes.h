// The token-lane steps of the lookup kernels, shared by the families that run them (i2s/lut/: the lookup
// kernels; i2s/mixed/: lookups co-issued with vpdpbusd), which link kernel_i2s_lut: a family never
// includes another's files. Written once over a vector class V (simd/x86.h: Ymm, Zmm; lut_neon.cc:
// Neon16); everything in an anonymous namespace, so each ISA file keeps its own copy under its flags.
//
// Token lanes: an int16 vector holds T tokens as T/2 dwords, the low word of dword i being token
// i and the high word token T/2 + i. Tables get that order for free from two dword gathers
// (tokens [0, T/2) and [T/2, T)), and widening is then two shifts, no shuffles:
// (d << 16) >> 16 is tokens [0, T/2), d >> 16 tokens [T/2, T), each in natural order. The int32 sums
// of a row are [row][token], T per row, tokens in natural order; the epilogue transposes them.
//
// What V provides (I: one vector of T = kInt16Lanes int16 lanes = T/2 int32 lanes, a token each):
//   kInt16Lanes; zero, load, store (aligned to the vector size), storeu, add16, sub16, add32,
//   slli32<s>, srai32<s>, odd_words(even, odd) (odd words from `odd`, even ones from `even`),
//   transpose32(I (&v)[T/2]) (v[r] lane c -> v[c] lane r); for the epilogue (simd::scale_sums)
//   F, cvt_ps, div_ps, mul_ps, set1_ps, storeu_ps.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "family.h"
#include "simd/vector_math.h"

namespace bitnet_onnx::i2s_lut {

// Bound that keeps the int16 sums exact: |entry| <= 4 x 128 = 512 (int8 activations in [-128, 127],
// 4 weights in {-1, 0, 1} per entry); an int16 sum is widened after at most kMaxInt16Groups = 63
// groups, 63 x 512 = 32256 <= 32767. The int32 sums are exact while |sum| <= 128 K < 2^31 (the op's
// K < 2^24).
constexpr int kMaxInt16Groups = 63;

namespace {

// Per-thread scratch, grown on demand and reused across calls (no allocation per job).
struct Scratch {
  void* ptr = nullptr;
  size_t size = 0;
  ~Scratch() { std::free(ptr); }
  void* get(size_t bytes) {
    if (bytes > size) {
      std::free(ptr);
      ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      size = ptr ? bytes : 0;
      if (!ptr) throw std::bad_alloc();
    }
    return ptr;
  }
};

// Byte b of `word` (b in [0, 8), little-endian) times 2^kShift: a table entry's offset from a row's 8 index
// bytes read as one word, by a shift and a mask (ALU work) instead of a byte load per lookup, since every lookup
// also loads its table entry and the byte loads took the load ports' other half (BENCHMARKS.md, Zen 4).
template <int kShift>
inline size_t scaled_byte(uint64_t word, int b) {
  static_assert(kShift < 8, "the byte's bits must stay in the word once shifted");
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "byte b is bits 8b..8b+7 of the word");
  constexpr uint64_t kMask = uint64_t{0xFF} << kShift;
  return static_cast<size_t>(b == 0 ? (word << kShift) & kMask : (word >> (8 * b - kShift)) & kMask);
}

template <class V>
struct TokenLanes {
  using I = typename V::I;
  static constexpr int T = V::kInt16Lanes;  // tokens per block: one per int16 lane
  static constexpr int H = T / 2;           // int32 lanes

  // A job's per-thread buffers (grown on demand, reused across calls): table_bytes of tables and the
  // int16 and int32 sums of `rows` rows, T tokens each.
  struct Buffers {
    void* tables;
    int16_t* acc16;
    int32_t* acc32;
  };
  static Buffers buffers(size_t table_bytes, int64_t rows) {
    thread_local Scratch table_mem, acc16_mem, acc32_mem;
    return {table_mem.get(table_bytes), static_cast<int16_t*>(acc16_mem.get(static_cast<size_t>(rows) * T * 2)),
            static_cast<int32_t*>(acc32_mem.get(static_cast<size_t>(rows) * T * 4))};
  }

  // Activation j (byte j of each dword) as int16 token lanes, from the dwords gathered for tokens
  // [0, H) (lo_tokens) and [H, T) (hi_tokens).
  template <int j>
  static I activation(I lo_tokens, I hi_tokens) {
    const I even = V::template srai32<24>(V::template slli32<24 - 8 * j>(lo_tokens));
    const I odd = V::template srai32<8>(V::template slli32<24 - 8 * j>(hi_tokens));
    return V::odd_words(even, odd);
  }

  // The 9 sums a*x + b*y, a, b in {-1, 0, 1}, at index (a + 1) + 3 (b + 1).
  static void combos(I x, I y, I (&out)[9]) {
    const I nx = V::sub16(V::zero(), x), ny = V::sub16(V::zero(), y);
    out[0] = V::add16(nx, ny);
    out[1] = ny;
    out[2] = V::add16(x, ny);
    out[3] = nx;
    out[4] = V::zero();
    out[5] = x;
    out[6] = V::add16(nx, y);
    out[7] = y;
    out[8] = V::add16(x, y);
  }

  // A row's int16 sums (token lanes) added into its int32 sums s[0, T) (tokens in natural order);
  // `first`: the int32 sums start here (store, not add).
  static void widen(I acc, int32_t* s, bool first) {
    const I lo = V::template srai32<16>(V::template slli32<16>(acc));
    const I hi = V::template srai32<16>(acc);
    V::store(s, first ? lo : V::add32(V::load(s), lo));
    V::store(s + H, first ? hi : V::add32(V::load(s + H), hi));
  }

  // int32 sums [row][token] of `rows` rows for tokens [0, count) -> out or y (a non-null: the op's
  // epilogue, out is then float memory), H x H blocks transposed in registers; out row t is token t,
  // column j row j.
  static void store_row(int32_t* out, int64_t at, I v, const float* a, int t, float s_w) {
    if (a)
      V::storeu_ps(reinterpret_cast<float*>(out) + at, simd::scale_sums<V>(v, a[t], s_w));
    else
      V::storeu(out + at, v);
  }

  // The output lines epilogue() will write for `rows` rows and tokens [0, count), fetched for writing while
  // the chunk's last sweep runs: each token's row of a chunk is a few lines, rows ld apart, which the hardware
  // prefetchers do not fetch ahead, so the epilogue's stores otherwise miss. Measured on Zen 4: 0-5% of the
  // mixed kernel's call at M >= 128 (benchmarks/mixed_profile.py's `prefetch`), 0-3% of the lookup kernels'.
  static void prefetch_out(const int32_t* out, int64_t rows, int count, int64_t row0, int64_t ld) {
    constexpr int kPerLine = 64 / sizeof(int32_t);  // int32 sums or floats: 4 bytes each
    for (int t = 0; t < count; ++t)
      for (int64_t j = 0; j < rows; j += kPerLine) __builtin_prefetch(out + (row0 + t) * ld + j, 1, 3);
  }

  static void epilogue(const int32_t* acc32, int64_t rows, int count, int64_t row0, int32_t* out, int64_t ld,
                       const float* a, float s_w) {
    int64_t j = 0;
    for (; j + H <= rows; j += H)
      for (int h = 0; h * H < count; ++h) {
        I v[H];
        #pragma GCC unroll 16
        for (int r = 0; r < H; ++r) v[r] = V::load(acc32 + (j + r) * T + h * H);
        V::transpose32(v);
        const int live = std::min(H, count - h * H);
        for (int t = 0; t < live; ++t) store_row(out, (row0 + h * H + t) * ld + j, v[t], a, h * H + t, s_w);
      }
    for (; j < rows; ++j)
      for (int t = 0; t < count; ++t) {
        const int32_t s = acc32[j * T + t];
        if (a)
          reinterpret_cast<float*>(out)[(row0 + t) * ld + j] = simd::scale_sum(s, a[t], s_w);
        else
          out[(row0 + t) * ld + j] = s;
      }
  }
};

// dot() and dot_scaled() (family.h) of a kernel over token blocks of two widths: Wide for full blocks,
// Narrow (if narrower) for a last block that fits it (zmm kernels run 16 leftover tokens in ymm: half the
// tables' build). Each block is one call of X::token_block(packed, n, k, rows, i0, count, m0, n0, n1,
// out, ld, a, s_w), which writes int32 sums (a null) or, a = rows.a, the op's epilogue (out is then
// float memory).
template <class Wide, class Narrow>
struct TokenBlocks {
  static void run(const uint8_t* packed, int64_t n, int64_t k, const i2s::QuantizedRows& rows, int64_t m0,
                  int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld, const float* a, float s_w) {
    if (m1 <= m0 || n1 <= n0) return;
    for (int64_t i0 = m0; i0 < m1;) {
      const int64_t left = m1 - i0;
      if (left <= Narrow::T && Narrow::T < Wide::T) {
        Narrow::token_block(packed, n, k, rows, i0, static_cast<int>(left), m0, n0, n1, out, ld, a, s_w);
        i0 += left;
      } else {
        const int count = static_cast<int>(std::min<int64_t>(Wide::T, left));
        Wide::token_block(packed, n, k, rows, i0, count, m0, n0, n1, out, ld, a, s_w);
        i0 += count;
      }
    }
  }

  static void dot(const uint8_t* packed, int64_t n, int64_t k, const i2s::QuantizedRows& rows, int64_t m0,
                  int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
    run(packed, n, k, rows, m0, m1, n0, n1, out, ld, nullptr, 0.0f);
  }

  static void dot_scaled(const uint8_t* packed, int64_t n, int64_t k, const i2s::QuantizedRows& rows, float s_w,
                         int64_t m0, int64_t m1, int64_t n0, int64_t n1, float* y, int64_t ldy) {
    run(packed, n, k, rows, m0, m1, n0, n1, reinterpret_cast<int32_t*>(y), ldy, rows.a, s_w);
  }
};

}  // namespace
}  // namespace bitnet_onnx::i2s_lut
