// Scalar tile ops: the portable path and the reference the SIMD paths are tested beside. With
// Precision::kBf16 the driver rounds q, k, v to bf16 and softmax_bf16 rounds p, so scores and pv sum
// exact bf16 x bf16 products in float32: the bf16 reference (what vdpbf16ps computes, up to order).
#include <cmath>
#include <limits>

#include "attention.h"

namespace bitnet_onnx {
namespace attention {
namespace {

// Both products are summed in pairs along the summed axis, the odd one first: the order of
// vdpbf16ps (avx512bf16.cc), so on bf16 operands (whose products are exact in float32) the scalar
// reference and the AVX512-BF16 path differ only by their exp, not by summation order.
void scores(const float* q, int64_t rows, int64_t d, const float* kt, int64_t ldk, float* s) {
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * kTileK;
    for (int j = 0; j < kTileK; ++j) sr[j] = 0.0f;
    for (int64_t c = 0; c < d; c += 2) {
      const float* k0 = kt + c * ldk;
      if (c + 1 < d) {
        const float q1 = q[r * d + c + 1];
        const float* k1 = k0 + ldk;
        for (int j = 0; j < kTileK; ++j) sr[j] += q1 * k1[j];
      }
      const float q0 = q[r * d + c];
      for (int j = 0; j < kTileK; ++j) sr[j] += q0 * k0[j];
    }
  }
}

// kRound: p rounded to bf16 before it is summed and stored (Precision::kBf16).
template <bool kRound>
void softmax_step(float* s, int64_t rows, float* m, float* l, float* alpha) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * kTileK;
    float mx = neg_inf;
    for (int j = 0; j < kTileK; ++j) mx = sr[j] > mx ? sr[j] : mx;
    const float m_new = m[r] > mx ? m[r] : mx;
    if (m_new == neg_inf) {  // nothing allowed so far in this row
      for (int j = 0; j < kTileK; ++j) sr[j] = 0.0f;
      alpha[r] = 1.0f;
      continue;
    }
    float sum = 0.0f;
    for (int j = 0; j < kTileK; ++j) {
      sr[j] = std::exp(sr[j] - m_new);
      if (kRound) sr[j] = round_bf16(sr[j]);
      sum += sr[j];
    }
    alpha[r] = std::exp(m[r] - m_new);
    l[r] = l[r] * alpha[r] + sum;
    m[r] = m_new;
  }
}

void softmax(float* s, int64_t rows, float* m, float* l, float* alpha) {
  softmax_step<false>(s, rows, m, l, alpha);
}
void softmax_bf16(float* s, int64_t rows, float* m, float* l, float* alpha) {
  softmax_step<true>(s, rows, m, l, alpha);
}

void pv(const float* p, int64_t rows, int64_t nk, const float* v, int64_t ldv, int64_t d, const float* alpha,
        float* o) {
  for (int64_t r = 0; r < rows; ++r) {
    float* orow = o + r * d;
    for (int64_t c = 0; c < d; ++c) orow[c] *= alpha[r];
    for (int64_t j = 0; j < nk; j += 2) {  // key pairs, odd key first (see scores)
      if (j + 1 < nk) {
        const float p1 = p[r * kTileK + j + 1];
        const float* v1 = v + (j + 1) * ldv;
        for (int64_t c = 0; c < d; ++c) orow[c] += p1 * v1[c];
      }
      const float p0 = p[r * kTileK + j];
      const float* v0 = v + j * ldv;
      for (int64_t c = 0; c < d; ++c) orow[c] += p0 * v0[c];
    }
  }
}

const TileOps kScalar = {"scalar", 1, scores, softmax, pv, softmax_bf16};

}  // namespace

const TileOps* scalar_tile_ops() { return &kScalar; }

}  // namespace attention
}  // namespace bitnet_onnx
