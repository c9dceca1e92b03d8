// The SIMD tile ops, written once over a vector type V (avx2.cc: 8 floats, avx512.cc: 16) and
// instantiated in each ISA's file with that file's flags. Everything here has internal linkage,
// so no copy compiled with wider instructions can stand in for another file's.
#pragma once

#include <cmath>
#include <cstdint>

#include "attention.h"

namespace bitnet_onnx {
namespace attention {
namespace {

// exp's polynomial (Cephes expf, |rel err| < 2 ulp on [-87.3, 88]); inputs here are <= 0.
constexpr float kExpLo = -87.33654f;  // below: exp underflows to 0 (and -inf masks give exactly 0)
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// RB rows x KC vectors of keys: the register block of q.k (RB * KC accumulators).
template <class V, int RB, int KC>
inline void scores_block(const float* q, int64_t d, const float* kt, int64_t ldk, float* s) {
  using R = typename V::reg;
  R acc[RB][KC];
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < KC; ++x) acc[r][x] = V::zero();
  for (int64_t c = 0; c < d; ++c) {
    R kv[KC];
    for (int x = 0; x < KC; ++x) kv[x] = V::load(kt + c * ldk + x * V::width);
    for (int r = 0; r < RB; ++r) {
      const R qb = V::set1(q[r * d + c]);
      for (int x = 0; x < KC; ++x) acc[r][x] = V::fmadd(qb, kv[x], acc[r][x]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < KC; ++x) V::store(s + r * kTileK + x * V::width, acc[r][x]);
}

// The last rows % RB rows, in one smaller block.
template <class V, int RB, int KC>
void scores_tail(int64_t n, const float* q, int64_t d, const float* kt, int64_t ldk, float* s) {
  if constexpr (RB > 1) {
    if (n == RB - 1) return scores_block<V, RB - 1, KC>(q, d, kt, ldk, s);
    scores_tail<V, RB - 1, KC>(n, q, d, kt, ldk, s);
  }
}

template <class V, int RB, int KC>
void scores(const float* q, int64_t rows, int64_t d, const float* kt, int64_t ldk, float* s) {
  // Key chunk outer: its slice of kt stays in L1 while every row block passes over it.
  for (int c0 = 0; c0 < kTileK; c0 += KC * V::width) {
    int64_t r = 0;
    for (; r + RB <= rows; r += RB) scores_block<V, RB, KC>(q + r * d, d, kt + c0, ldk, s + r * kTileK + c0);
    if (r < rows) scores_tail<V, RB, KC>(rows - r, q + r * d, d, kt + c0, ldk, s + r * kTileK + c0);
  }
}

// The online-softmax step of RB rows (s, m, l, alpha, p16 at the block's first row): each row's operations
// and their order are one row's alone; the rows of a block are interleaved so that one row's reductions
// (max, sum) overlap another's exps. p16 (kRound only, may be null): the rounded p also stored as bf16
// bits [rows][kTileK].
template <class V, bool kRound, int RB>
inline void softmax_block(float* s, float* m, float* l, float* alpha, uint16_t* p16) {
  using R = typename V::reg;
  constexpr int n = kTileK / V::width;
  const float neg_inf = -INFINITY;
  R x[RB][n];
  float m_new[RB];
  for (int b = 0; b < RB; ++b) {
    for (int i = 0; i < n; ++i) x[b][i] = V::load(s + b * kTileK + i * V::width);
    R mx = x[b][0];
    for (int i = 1; i < n; ++i) mx = V::max(mx, x[b][i]);
    const float tile_max = V::hmax(mx);
    m_new[b] = m[b] > tile_max ? m[b] : tile_max;
  }
  R sum[RB];
  for (int b = 0; b < RB; ++b) {
    float* sr = s + b * kTileK;
    sum[b] = V::zero();
    if (m_new[b] == neg_inf) {  // nothing allowed so far in this row
      for (int i = 0; i < n; ++i) V::store(sr + i * V::width, V::zero());
      if constexpr (kRound)
        if (p16)
          for (int j = 0; j < kTileK; ++j) p16[b * kTileK + j] = 0;
      continue;
    }
    const R mv = V::set1(m_new[b]);
    for (int i = 0; i < n; ++i) {
      R e = V::exp(V::sub(x[b][i], mv));
      if constexpr (kRound) {
        e = V::round_bf16(e);
        if (p16) V::store_bf16(p16 + b * kTileK + i * V::width, e);
      }
      if (!p16) V::store(sr + i * V::width, e);  // the bf16 tile ops read p16 only
      sum[b] = V::add(sum[b], e);
    }
  }
  for (int b = 0; b < RB; ++b) {
    if (m_new[b] == neg_inf) {
      alpha[b] = 1.0f;
      continue;
    }
    // exp(0) is exactly 1: a row whose maximum did not move (most tiles past a row's first few) needs no exp.
    alpha[b] = m[b] == m_new[b] ? 1.0f : std::exp(m[b] - m_new[b]);
    l[b] = l[b] * alpha[b] + V::hsum(sum[b]);
    m[b] = m_new[b];
  }
}

// Blocks of RB rows (RB = 4 on AVX-512: 16 of its 32 registers hold the block's scores; 1 on AVX2's 16),
// the last rows % RB one at a time: the same bits for any RB.
template <class V, bool kRound = false, int RB = 1>
void softmax_step(float* s, int64_t rows, float* m, float* l, float* alpha, uint16_t* p16) {
  int64_t r = 0;
  for (; r + RB <= rows; r += RB)
    softmax_block<V, kRound, RB>(s + r * kTileK, m + r, l + r, alpha + r, p16 ? p16 + r * kTileK : nullptr);
  for (; r < rows; ++r)
    softmax_block<V, kRound, 1>(s + r * kTileK, m + r, l + r, alpha + r, p16 ? p16 + r * kTileK : nullptr);
}

template <class V, int RB = 1>
void softmax(float* s, int64_t rows, float* m, float* l, float* alpha) {
  softmax_step<V, false, RB>(s, rows, m, l, alpha, nullptr);
}
template <class V, int RB = 1>
void softmax_bf16(float* s, int64_t rows, float* m, float* l, float* alpha) {
  softmax_step<V, true, RB>(s, rows, m, l, alpha, nullptr);
}

// RB rows x DC vectors of the head dimension: o = o * alpha + p . v over nk keys.
template <class V, int RB, int DC>
inline void pv_block(const float* p, int64_t nk, const float* v, int64_t ldv, int64_t d, const float* alpha,
                     float* o) {
  using R = typename V::reg;
  R acc[RB][DC];
  for (int r = 0; r < RB; ++r) {
    const R a = V::set1(alpha[r]);
    for (int x = 0; x < DC; ++x) acc[r][x] = V::mul(V::load(o + r * d + x * V::width), a);
  }
  for (int64_t j = 0; j < nk; ++j) {
    R vv[DC];
    for (int x = 0; x < DC; ++x) vv[x] = V::load(v + j * ldv + x * V::width);
    for (int r = 0; r < RB; ++r) {
      const R pb = V::set1(p[r * kTileK + j]);
      for (int x = 0; x < DC; ++x) acc[r][x] = V::fmadd(pb, vv[x], acc[r][x]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < DC; ++x) V::store(o + r * d + x * V::width, acc[r][x]);
}

template <class V, int RB, int DC>
void pv_tail(int64_t n, const float* p, int64_t nk, const float* v, int64_t ldv, int64_t d, const float* alpha,
             float* o) {
  if constexpr (RB > 1) {
    if (n == RB - 1) return pv_block<V, RB - 1, DC>(p, nk, v, ldv, d, alpha, o);
    pv_tail<V, RB - 1, DC>(n, p, nk, v, ldv, d, alpha, o);
  }
}

template <class V, int RB, int DC>
void pv_rows(const float* p, int64_t rows, int64_t nk, const float* v, int64_t ldv, int64_t d, const float* alpha,
             float* o, int64_t c0) {
  int64_t r = 0;
  for (; r + RB <= rows; r += RB)
    pv_block<V, RB, DC>(p + r * kTileK, nk, v + c0, ldv, d, alpha + r, o + r * d + c0);
  if (r < rows) pv_tail<V, RB, DC>(rows - r, p + r * kTileK, nk, v + c0, ldv, d, alpha + r, o + r * d + c0);
}

// Needs d % V::width == 0. Head-dimension chunk outer: its slice of the v tile stays in L1.
template <class V, int RB, int DC>
void pv(const float* p, int64_t rows, int64_t nk, const float* v, int64_t ldv, int64_t d, const float* alpha,
        float* o) {
  int64_t c0 = 0;
  for (; c0 + DC * V::width <= d; c0 += DC * V::width) pv_rows<V, RB, DC>(p, rows, nk, v, ldv, d, alpha, o, c0);
  for (; c0 < d; c0 += V::width) pv_rows<V, RB, 1>(p, rows, nk, v, ldv, d, alpha, o, c0);
}

}  // namespace
}  // namespace attention
}  // namespace bitnet_onnx
