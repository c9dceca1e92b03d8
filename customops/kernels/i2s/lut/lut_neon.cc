// The NEON lookup kernel: 16-token tables (one entry = two q registers, 32 B; 2.6 KB per group),
// 12 groups per K block (31 KB of tables: the 32 KB L1 class of small cores; lut_kernels.h). Plain
// Advanced SIMD (every AArch64 CPU has it); the quantizer is the neon multiply kernel's.
#include <arm_neon.h>

#include <cstring>

#include "lut_tables.h"

namespace bitnet_onnx::i2s::lut {
namespace {

// 16 int16 token lanes as 8 dwords: dwords 0-3 in a, 4-7 in b (lut_tables.h's lane order).
struct Neon16 {
  struct I {
    int32x4_t a, b;
  };
  struct F {
    float32x4_t a, b;
  };
  static constexpr int kInt16Lanes = 16;
  static I zero() { return {vdupq_n_s32(0), vdupq_n_s32(0)}; }
  static I load(const void* p) {
    const int32_t* q = static_cast<const int32_t*>(p);
    return {vld1q_s32(q), vld1q_s32(q + 4)};
  }
  static void store(void* p, I v) {
    int32_t* q = static_cast<int32_t*>(p);
    vst1q_s32(q, v.a);
    vst1q_s32(q + 4, v.b);
  }
  static int32x4_t add16q(int32x4_t x, int32x4_t y) {
    return vreinterpretq_s32_s16(vaddq_s16(vreinterpretq_s16_s32(x), vreinterpretq_s16_s32(y)));
  }
  static int32x4_t sub16q(int32x4_t x, int32x4_t y) {
    return vreinterpretq_s32_s16(vsubq_s16(vreinterpretq_s16_s32(x), vreinterpretq_s16_s32(y)));
  }
  static I add16(I x, I y) { return {add16q(x.a, y.a), add16q(x.b, y.b)}; }
  static I sub16(I x, I y) { return {sub16q(x.a, y.a), sub16q(x.b, y.b)}; }
  static I add32(I x, I y) { return {vaddq_s32(x.a, y.a), vaddq_s32(x.b, y.b)}; }
  template <int s>
  static I slli32(I x) {
    if constexpr (s == 0) return x;
    else return {vshlq_n_s32(x.a, s), vshlq_n_s32(x.b, s)};
  }
  template <int s>
  static I srai32(I x) {
    return {vshrq_n_s32(x.a, s), vshrq_n_s32(x.b, s)};
  }
  static I odd_words(I even, I odd) {
    const uint32x4_t low = vdupq_n_u32(0xFFFFu);
    return {vbslq_s32(low, even.a, odd.a), vbslq_s32(low, even.b, odd.b)};
  }
  static I gather32(const int8_t* base, int64_t stride, int count) {
    int32_t d[8] = {};
    for (int i = 0; i < count && i < 8; ++i) std::memcpy(&d[i], base + i * stride, 4);
    return {vld1q_s32(d), vld1q_s32(d + 4)};
  }
  // 4 x 4 int32 transpose of r[0..3].
  static void transpose4(int32x4_t (&r)[4]) {
    const int32x4_t t0 = vtrn1q_s32(r[0], r[1]), t1 = vtrn2q_s32(r[0], r[1]);
    const int32x4_t t2 = vtrn1q_s32(r[2], r[3]), t3 = vtrn2q_s32(r[2], r[3]);
    r[0] = vreinterpretq_s32_s64(vtrn1q_s64(vreinterpretq_s64_s32(t0), vreinterpretq_s64_s32(t2)));
    r[1] = vreinterpretq_s32_s64(vtrn1q_s64(vreinterpretq_s64_s32(t1), vreinterpretq_s64_s32(t3)));
    r[2] = vreinterpretq_s32_s64(vtrn2q_s64(vreinterpretq_s64_s32(t0), vreinterpretq_s64_s32(t2)));
    r[3] = vreinterpretq_s32_s64(vtrn2q_s64(vreinterpretq_s64_s32(t1), vreinterpretq_s64_s32(t3)));
  }
  // v[r] lane c -> v[c] lane r (8 x 8 int32) as four 4 x 4 blocks.
  static void transpose32(I (&v)[8]) {
    int32x4_t top_left[4], top_right[4], bottom_left[4], bottom_right[4];
    for (int r = 0; r < 4; ++r) {
      top_left[r] = v[r].a, top_right[r] = v[r].b;
      bottom_left[r] = v[4 + r].a, bottom_right[r] = v[4 + r].b;
    }
    transpose4(top_left), transpose4(top_right), transpose4(bottom_left), transpose4(bottom_right);
    for (int c = 0; c < 4; ++c) {
      v[c] = {top_left[c], bottom_left[c]};
      v[4 + c] = {top_right[c], bottom_right[c]};
    }
  }
  static void storeu(void* p, I v) { store(p, v); }
  // the float face of the epilogue (simd::scale_sums)
  static F set1_ps(float x) { return {vdupq_n_f32(x), vdupq_n_f32(x)}; }
  static F cvt_ps(I v) { return {vcvtq_f32_s32(v.a), vcvtq_f32_s32(v.b)}; }
  static F div_ps(F x, F y) { return {vdivq_f32(x.a, y.a), vdivq_f32(x.b, y.b)}; }
  static F mul_ps(F x, F y) { return {vmulq_f32(x.a, y.a), vmulq_f32(x.b, y.b)}; }
  static void storeu_ps(float* p, F v) {
    vst1q_f32(p, v.a);
    vst1q_f32(p + 4, v.b);
  }
};

constexpr I2SKernel kNeon = LutKernel<12, Neon16, Neon16>::table("lut-neon");

}  // namespace

const I2SKernel* neon_kernel() { return &kNeon; }

}  // namespace bitnet_onnx::i2s::lut
