// aarch64 Advanced SIMD kernel. Same results as scalar.cc bit for bit:
// - repack keeps the I2_S layout and only rewrites the unused code 0b11 to 0b01 (value 0), so
//   dot() can decode every code as code - 1;
// - three tables share repack and quantize and differ in dot(): "neon", widening int8 multiplies
//   into int16 lanes (at most 16 products of |q*t| <= 128 per lane: never overflows) folded into
//   int32 after every 128-value block; "dotprod", SDOT (neon_dotprod.cc); "i8mm", SMMLA
//   (neon_i8mm.cc). The ISA table (isa.cc) offers each where HWCAP says the CPU runs it;
// - quantize() follows bitnet_onnx.ternary: the sum of squares is numpy's pairwise float64 sum
//   (what np.mean computes), then float32 throughout, round half to even.
#if defined(__aarch64__)
#include <arm_neon.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "mul_kernels.h"
#include "neon_panel.h"
#include "neon_tile.h"
#include "pairwise_sum.h"

namespace bitnet_onnx::i2s::mul {
namespace {

constexpr float kActEps = 1e-5f;  // floor of the per-token absmax

size_t packed_bytes(int64_t n, int64_t k) { return static_cast<size_t>(n) * static_cast<size_t>(k / 4); }

// 0b11 -> 0b01 in every 2-bit field: a field is 0b11 where bit 1 and bit 0 are both set.
inline uint8_t fix_unused_codes(uint8_t b) { return b ^ static_cast<uint8_t>((((b >> 1) & b) & 0x55) << 1); }

void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) {
  const size_t bytes = packed_bytes(n, k);
  size_t i = 0;
  const uint8x16_t low_bits = vdupq_n_u8(0x55);
  for (; i + 16 <= bytes; i += 16) {
    const uint8x16_t b = vld1q_u8(i2s + i);
    const uint8x16_t both = vandq_u8(vandq_u8(vshrq_n_u8(b, 1), b), low_bits);
    vst1q_u8(packed + i, veorq_u8(b, vshlq_n_u8(both, 1)));
  }
  for (; i < bytes; ++i) packed[i] = fix_unused_codes(i2s[i]);
}

// The value quantization sees: x, or (x * inv_rms) * w with the fused RMSNorm (float32, in order).
inline float32x4_t normed4(const float* x, const float* w, float32x4_t inv_rms, int64_t i) {
  const float32x4_t v = vld1q_f32(x + i);
  return w ? vmulq_f32(vmulq_f32(v, inv_rms), vld1q_f32(w + i)) : v;
}
inline float normed1(const float* x, const float* w, float inv_rms, int64_t i) {
  return w ? (x[i] * inv_rms) * w[i] : x[i];
}

inline int8_t quantize1(float v, float scale) {
  const float r = std::nearbyint(v * scale);  // default rounding mode: half to even
  return static_cast<int8_t>(std::min(127.0f, std::max(-128.0f, r)));
}

// Rounds 4 values half to even; narrowing with saturation is the clamp to [-128, 127].
inline int16x4_t round4(float32x4_t v, float32x4_t scale) {
  return vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v, scale)));
}

void quantize_row(const float* x, int64_t k, const float* w, float eps, int8_t* q, float* a,
                  int32_t* qsum) {
  float inv = 1.0f;
  if (w) {
    const double ms = sum_squares_reference(x, k) / static_cast<double>(k);
    inv = static_cast<float>(1.0 / std::sqrt(ms + static_cast<double>(eps)));
  }
  const float32x4_t vinv = vdupq_n_f32(inv);

  // Pass 1: absmax and whether every normed value is finite (|v| <= FLT_MAX fails for NaN/Inf).
  float32x4_t vmax = vdupq_n_f32(0.0f);
  uint32x4_t finite = vdupq_n_u32(~0u);
  const float32x4_t flt_max = vdupq_n_f32(FLT_MAX);
  int64_t i = 0;
  for (; i + 4 <= k; i += 4) {
    const float32x4_t av = vabsq_f32(normed4(x, w, vinv, i));
    finite = vandq_u32(finite, vcleq_f32(av, flt_max));
    vmax = vmaxq_f32(vmax, av);
  }
  bool all_finite = vminvq_u32(finite) != 0;
  float absmax = vmaxvq_f32(vmax);
  for (; i < k; ++i) {
    const float v = normed1(x, w, inv, i);
    all_finite = all_finite && std::isfinite(v);
    absmax = std::max(absmax, std::fabs(v));
  }
  if (!all_finite) {
    std::memset(q, 0, static_cast<size_t>(k));
    *a = std::nanf("");
    *qsum = 0;
    return;
  }

  // Pass 2: recompute the same normed values and round them.
  const float scale = 127.0f / std::max(absmax, kActEps);
  const float32x4_t vscale = vdupq_n_f32(scale);
  int32x4_t vsum = vdupq_n_s32(0);
  i = 0;
  for (; i + 16 <= k; i += 16) {
    const int16x8_t h0 = vcombine_s16(round4(normed4(x, w, vinv, i), vscale),
                                      round4(normed4(x, w, vinv, i + 4), vscale));
    const int16x8_t h1 = vcombine_s16(round4(normed4(x, w, vinv, i + 8), vscale),
                                      round4(normed4(x, w, vinv, i + 12), vscale));
    const int8x16_t qv = vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1));
    vst1q_s8(q + i, qv);
    vsum = vpadalq_s16(vsum, vpaddlq_s8(qv));
  }
  int32_t sum = vaddvq_s32(vsum);
  for (; i < k; ++i) {
    q[i] = quantize1(normed1(x, w, inv, i), scale);
    sum += q[i];
  }
  *a = scale;
  *qsum = sum;
}

void quantize(const float* x, int64_t m, int64_t k, const float* norm_w, float eps, int8_t* q,
              float* a, int32_t* qsum) {
  for (int64_t r = 0; r < m; ++r) quantize_row(x + r * k, k, norm_w, eps, q + r * k, a + r, qsum + r);
}

// Without dotprod: int8 x int8 -> int16 products, 16 per lane per block (|sum| <= 16 * 128),
// folded into int32 at the end of every block: never overflows.
struct Widening {
  static inline void step(int32x4_t&, int16x8_t& part, int8x16_t w, int8x16_t q) {
    part = vmlal_s8(part, vget_low_s8(w), vget_low_s8(q));
    part = vmlal_high_s8(part, w, q);
  }
  static inline void flush(int32x4_t& acc, int16x8_t& part) { acc = vpadalq_s16(acc, part); }
};

void dot_widening(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0,
                  int64_t m1, int64_t n0, int64_t n1, int32_t* out, int64_t ld) {
  (void)n;
  tiled_dot<Widening>(packed, k, rows, m0, m1, n0, n1, out, ld);
}

// Direct (plain NEON): decode per 4-token group, small tiles. Buffered (dotprod, i8mm): the
// driver's token tile is the panel's reuse, so the tiles are the x86 buffered paths' shape.
constexpr int64_t kTileM = 16;   // multiple of kTileTokens
constexpr int64_t kTileN = 64;   // multiple of 4 rows
constexpr int64_t kBufferedTileM = 256;
constexpr int64_t kBufferedTileN = 128;  // multiple of the 8-row i8mm panel and of kTileNAlign (driver.cc)

const I2SKernel kNeon = {"neon", packed_bytes, repack, quantize, dot_widening, kTileM, kTileN};
const I2SKernel kDotprod = {"dotprod", packed_bytes, repack, quantize, neon_dotprod_dot, kBufferedTileM,
                            kBufferedTileN, nullptr, /*min_tile_n=*/32};
const I2SKernel kI8mm = {"i8mm", packed_bytes, repack, quantize, neon_i8mm_dot, kBufferedTileM, kBufferedTileN,
                         nullptr, /*min_tile_n=*/32};

}  // namespace

const I2SKernel* neon_kernel() { return &kNeon; }
// select_isa (isa.h) picks these only where cpu_features has dotprod (and i8mm): their code is
// built with those extensions.
const I2SKernel* neon_dotprod_kernel() { return &kDotprod; }
const I2SKernel* neon_i8mm_kernel() { return &kI8mm; }

}  // namespace bitnet_onnx::i2s::mul
#endif  // __aarch64__
