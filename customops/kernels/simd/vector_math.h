// Math written once over a vector class V (simd/x86.h's Ymm and Zmm; scale_sums also the lookup
// family's Neon16): each function is one sequence of V's operations, so every width runs the same
// steps and only the instructions of a step differ. Like the vector classes, everything sits in an
// anonymous namespace: each ISA's file instantiates its own copy under its own flags.
#pragma once

#include <cstdint>

namespace bitnet_onnx {
namespace simd {
namespace {

// The op's epilogue, y = (float(sum) / a) * s_w, in that order (docs/op.md): one sum ...
inline float scale_sum(int32_t sum, float a, float s_w) { return (static_cast<float>(sum) / a) * s_w; }

// ... and a vector of int32 sums.
template <class V>
typename V::F scale_sums(typename V::I sums, float a, float s_w) {
  return V::mul_ps(V::div_ps(V::cvt_ps(sums), V::set1_ps(a)), V::set1_ps(s_w));
}

// attention.h's round_bf16 on every lane, in integer operations (no AVX512-BF16 needed): round to
// nearest even on the high half; NaN stays a (quiet) NaN; denormals flush to a signed zero.
template <class V>
typename V::F round_bf16(typename V::F x) {
  using I = typename V::I;
  const I u = V::cast_si(x);
  const auto denormal = V::testn32(u, V::dwords(0x7f800000));
  const auto nan = V::gt32(V::and_(u, V::dwords(0x7fffffff)), V::dwords(0x7f800000));
  I r = V::add32(u, V::add32(V::dwords(0x7fff), V::and_(V::srli32(u, 16), V::dwords(1))));
  r = V::mask_or32(r, nan, u, V::dwords(0x00400000));
  r = V::mask_and32(r, denormal, u, V::dwords(static_cast<int32_t>(0x80000000u)));
  return V::cast_ps(V::and_(r, V::dwords(static_cast<int32_t>(0xffff0000u))));
}

// exp's polynomial (Cephes expf, |rel err| < 2 ulp on [-87.3, 88]); the attention softmax's inputs
// are <= 0.
constexpr float kExpLo = -87.33654f;  // below: exp underflows to 0 (and -inf masks give exactly 0)
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

template <class V>
typename V::F exp_ps(typename V::F x) {
  using F = typename V::F;
  const auto under = V::lt_ps(x, V::set1_ps(kExpLo));  // and -inf; NaN stays
  x = V::min_ps(V::max_ps(x, V::set1_ps(kExpLo)), V::set1_ps(88.0f));
  const F fx = V::round_ps(V::mul_ps(x, V::set1_ps(kLog2e)));
  F r = V::fnmadd_ps(fx, V::set1_ps(kLn2Hi), x);
  r = V::fnmadd_ps(fx, V::set1_ps(kLn2Lo), r);
  const F z = V::mul_ps(r, r);
  F y = V::set1_ps(kExpP[0]);
  for (int i = 1; i < 6; ++i) y = V::fmadd_ps(y, r, V::set1_ps(kExpP[i]));
  y = V::fmadd_ps(y, z, V::add_ps(r, V::set1_ps(1.0f)));
  return V::zero_where(under, V::mul_pow2(y, fx));
}

// v[r] lane c -> v[c] lane r (kInt32Lanes x kInt32Lanes int32; V::transpose32): unpacks of dword
// and qword pairs, then V's 128-bit lane shuffles.
template <class V>
void transpose_dwords(typename V::I (&v)[V::kInt32Lanes]) {
  using I = typename V::I;
  constexpr int n = V::kInt32Lanes;
  I t[n], u[n];
  for (int i = 0; i < n / 2; ++i) {
    t[2 * i] = V::unpacklo32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = V::unpackhi32(v[2 * i], v[2 * i + 1]);
  }
  // u[4i + k], 128-bit lane L: rows 4i .. 4i + 3 of column 4L + k.
  for (int i = 0; i < n / 4; ++i) {
    u[4 * i] = V::unpacklo64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = V::unpackhi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = V::unpacklo64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = V::unpackhi64(t[4 * i + 1], t[4 * i + 3]);
  }
  V::gather_lanes128(u, v);
}

}  // namespace
}  // namespace simd
}  // namespace bitnet_onnx
