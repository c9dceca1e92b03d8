// Scalar tile ops: the portable path and the reference the SIMD paths are tested beside.
#include <cmath>
#include <limits>

#include "attention.h"

namespace bitnet_onnx {
namespace attention {
namespace {

void scores(const float* q, int64_t rows, int64_t d, const float* kt, int64_t ldk, float* s) {
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * kTileK;
    for (int j = 0; j < kTileK; ++j) sr[j] = 0.0f;
    for (int64_t c = 0; c < d; ++c) {
      const float qv = q[r * d + c];
      const float* kr = kt + c * ldk;
      for (int j = 0; j < kTileK; ++j) sr[j] += qv * kr[j];
    }
  }
}

void softmax(float* s, int64_t rows, float* m, float* l, float* alpha) {
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
      sum += sr[j];
    }
    alpha[r] = std::exp(m[r] - m_new);
    l[r] = l[r] * alpha[r] + sum;
    m[r] = m_new;
  }
}

void pv(const float* p, int64_t rows, int64_t nk, const float* v, int64_t ldv, int64_t d, const float* alpha,
        float* o) {
  for (int64_t r = 0; r < rows; ++r) {
    float* orow = o + r * d;
    for (int64_t c = 0; c < d; ++c) orow[c] *= alpha[r];
    for (int64_t j = 0; j < nk; ++j) {
      const float pj = p[r * kTileK + j];
      const float* vr = v + j * ldv;
      for (int64_t c = 0; c < d; ++c) orow[c] += pj * vr[c];
    }
  }
}

const TileOps kScalar = {"scalar", 1, scores, softmax, pv};

}  // namespace

const TileOps* scalar_tile_ops() { return &kScalar; }

}  // namespace attention
}  // namespace bitnet_onnx
