// The activations' quantizer of the x86 multiply kernels (avx2.cc, avxvnni.cc, avx512vnni.cc, amx.cc),
// written once for both vector widths (simd/x86.h's Ymm and Zmm); the weight layout and dot() they share
// with other families are in kernels/i2s_panel/.
// Everything sits in an anonymous namespace so that each ISA's translation unit, compiled with its
// own -m flags, keeps a private copy (no ODR merging of an AVX-512 build of a helper into the AVX2
// path).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "family.h"
#include "pairwise_sum.h"
#include "simd/x86.h"

namespace bitnet_onnx::i2s::mul::x86 {
namespace {

// The leaves of sum_squares_reference (pairwise_sum.h: numpy's order, so inv_rms is bit-identical
// to the numpy reference on every path) as the vector code finds them: a piece of n values is
// one leaf (n <= 128), two equal leaves (n <= 256, n % 16 == 0) or four (n <= 512,
// n % 32 == 0), computed side by side; anything else splits like numpy. Leaf(x, n, sums) fills
// sums[0..NL) for NL leaves of n / NL values each.
template <class LeafSums>
inline double pairwise_sum_squares(const float* x, int64_t n) {
  double s[4];
  if (n <= 128) {
    LeafSums::template run<1>(x, n, s);
    return s[0];
  }
  if (n <= 256 && n % 16 == 0) {
    LeafSums::template run<2>(x, n / 2, s);
    return s[0] + s[1];
  }
  if (n <= 512 && n % 32 == 0) {
    LeafSums::template run<4>(x, n / 4, s);
    return (s[0] + s[1]) + (s[2] + s[3]);
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum_squares<LeafSums>(x, n2) + pairwise_sum_squares<LeafSums>(x + n2, n - n2);
}

// Per-thread float row scratch (grown once): the fused RMSNorm's output, so quantization's
// second pass reads it instead of normalizing again.
inline float* row_buffer(int64_t k) {
  thread_local std::vector<float> row;
  if (static_cast<int64_t>(row.size()) < k) row.resize(static_cast<size_t>(k));
  return row.data();
}


// ---------------------------------------------------------------------------------------------
// Quantization (numerics of scalar.cc, vectorized once for both widths of simd/x86.h).

// NL numpy leaves of n values (n % 8 == 0) side by side; each keeps numpy's 8 partial sums r[0..7]
// in 8 / V::kDoubles vectors of doubles.
template <class V>
struct Leaves {
  template <int NL>
  static void run(const float* x, int64_t n, double* sums) {
    constexpr int P = 8 / V::kDoubles;
    typename V::D r[NL][P];
    for (int l = 0; l < NL; ++l)
      for (int p = 0; p < P; ++p) {
        const typename V::D v = V::widen_pd(x + l * n + p * V::kDoubles);
        r[l][p] = V::mul_pd(v, v);
      }
    for (int64_t i = 8; i < n; i += 8)
      for (int l = 0; l < NL; ++l)
        for (int p = 0; p < P; ++p) {
          const typename V::D v = V::widen_pd(x + l * n + i + p * V::kDoubles);
          r[l][p] = V::fmadd_pd(v, v, r[l][p]);
        }
    for (int l = 0; l < NL; ++l) {
      double lane[8];
      for (int p = 0; p < P; ++p) V::storeu_pd(lane + p * V::kDoubles, r[l][p]);
      sums[l] = combine8(lane);
    }
  }
};

template <class V, bool kNorm>
void quantize_row(const float* x, int64_t k, const float* w, float inv_rms, int8_t* q, float* a, int32_t* qsum) {
  constexpr int64_t kFloats = V::kBytes / 4;
  const typename V::F inv = V::set1_ps(inv_rms);
  // |v| as uint32 bits: their max is the bits of max|v| for finite values (the order of
  // non-negative floats), and >= the bits of +Inf (0x7f800000) iff some value is Inf or NaN.
  typename V::I vmax = V::zero();
  float* normed_row = kNorm ? row_buffer(k) : nullptr;  // the normed row, read again below
  for (int64_t i = 0; i < k; i += kFloats) {
    typename V::F v = V::loadu_ps(x + i);
    if (kNorm) {
      v = V::mul_ps(V::mul_ps(v, inv), V::loadu_ps(w + i));
      V::storeu_ps(normed_row + i, v);
    }
    vmax = V::max_u32(vmax, V::abs_bits(v));
  }
  if (kNorm) x = normed_row;
  const uint32_t max_bits = V::reduce_max_u32(vmax);
  if (max_bits >= 0x7f800000u) {
    std::memset(q, 0, static_cast<size_t>(k));
    *a = std::nanf("");
    *qsum = 0;
    return;
  }
  float absmax;
  std::memcpy(&absmax, &max_bits, 4);
  const float scale = 127.0f / std::max(absmax, 1e-5f);
  const typename V::F vs = V::set1_ps(scale);
  // One vector of bytes per step: saturating packs (== the clamp to [-128, 127]) back in memory order.
  typename V::I sum = V::zero();
  for (int64_t i = 0; i < k; i += V::kBytes) {
    typename V::I qi[4];
    for (int j = 0; j < 4; ++j) qi[j] = V::cvt_round(V::mul_ps(V::loadu_ps(x + i + kFloats * j), vs));
    const typename V::I qb = V::pack_bytes(qi);
    V::storeu(q + i, qb);
    sum = V::add_bytes(sum, qb);
  }
  *a = scale;
  *qsum = V::reduce_add32(sum);
}

// I2SKernel::quantize for width V.
template <class V>
void quantize(const float* x, int64_t m, int64_t k, const float* norm_w, float eps, int8_t* q, float* a,
              int32_t* qsum) {
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * k;
    if (norm_w) {
      const double ss = pairwise_sum_squares<Leaves<V>>(xr, k);
      const float inv_rms = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(k) + static_cast<double>(eps)));
      quantize_row<V, true>(xr, k, norm_w, inv_rms, q + r * k, a + r, qsum + r);
    } else {
      quantize_row<V, false>(xr, k, nullptr, 1.0f, q + r * k, a + r, qsum + r);
    }
  }
}

}  // namespace
}  // namespace bitnet_onnx::i2s::mul::x86
