// The SIMD tile ops, written once over the float face of a vector type V (simd/x86.h's Ymm in
// avx2.cc: 8 floats, Zmm in avx512.cc: 16) and instantiated in each ISA's file with that file's
// flags; their register blocks (block_product, tile_block) also serve the bf16 tiles of
// avx512bf16.cc. Everything here has internal linkage, so no copy compiled with wider instructions
// can stand in for another file's.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attention.h"
#include "simd/vector_math.h"
#include "with_const.h"

namespace bitnet_onnx {
namespace attention {
namespace {

// ---- register blocks: RB rows x C vectors of float accumulators over a product's inner dimension

// acc[r][x] += a(r, i) * b(i, x) for i < n: Prod::row broadcasts operand i of row r, Prod::col loads
// vector x of the other operand's row i, Prod::madd meets them (an FMA, or bf16 pair dot products).
template <class Prod, class Acc, int RB, int C>
inline void block_product(Acc (&acc)[RB][C], int64_t n, const Prod& prod) {
  for (int64_t i = 0; i < n; ++i) {
    typename Prod::B b[C];
    for (int x = 0; x < C; ++x) b[x] = prod.col(i, x);
    for (int r = 0; r < RB; ++r) {
      const typename Prod::A a = prod.row(r, i);
      for (int x = 0; x < C; ++x) acc[r][x] = Prod::madd(acc[r][x], a, b[x]);
    }
  }
}

// float operands: a [rows][lda] broadcast one value at a time, b [n][ldb] read V::kFloats at a time.
template <class V>
struct FloatProduct {
  using A = typename V::F;
  using B = typename V::F;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  A row(int r, int64_t i) const { return V::set1_ps(a[r * lda + i]); }
  B col(int64_t i, int x) const { return V::loadu_ps(b + i * ldb + x * V::kFloats); }
  static typename V::F madd(typename V::F acc, A x, B y) { return V::fmadd_ps(x, y, acc); }
};

// out[r][x-th vector] (row stride ld) = the product over n, added to out * alpha[r] (alpha null:
// to zero), RB x C accumulators.
template <class V, int RB, int C, class Prod>
inline void tile_block(const Prod& prod, int64_t n, float* out, int64_t ld, const float* alpha) {
  typename V::F acc[RB][C];
  for (int r = 0; r < RB; ++r) {
    if (!alpha) {
      for (int x = 0; x < C; ++x) acc[r][x] = V::zero_ps();
      continue;
    }
    const typename V::F a = V::set1_ps(alpha[r]);
    for (int x = 0; x < C; ++x) acc[r][x] = V::mul_ps(V::loadu_ps(out + r * ld + x * V::kFloats), a);
  }
  block_product(acc, n, prod);
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < C; ++x) V::storeu_ps(out + r * ld + x * V::kFloats, acc[r][x]);
}

// Rows [0, rows) in blocks of RB, the last rows % RB in one smaller block: block(R, r) runs the R
// rows from row r (R a std::integral_constant).
template <int RB, class Block>
inline void in_row_blocks(int64_t rows, Block&& block) {
  int64_t r = 0;
  for (; r + RB <= rows; r += RB) block(std::integral_constant<int, RB>{}, r);
  if (r < rows) with_const<RB - 1>(static_cast<int>(rows - r), [&](auto R) { block(R, r); });
}

// Columns [0, d) (d % W == 0) in chunks of C vectors of W floats, the rest one vector at a time:
// chunk(C', c0) runs C' vectors from column c0. Chunk outer: its slice of the operand read by
// columns stays in L1 while every row block passes over it.
template <int C, int W, class Chunk>
inline void in_column_chunks(int64_t d, Chunk&& chunk) {
  int64_t c0 = 0;
  for (; c0 + C * W <= d; c0 += C * W) chunk(std::integral_constant<int, C>{}, c0);
  for (; c0 < d; c0 += W) chunk(std::integral_constant<int, 1>{}, c0);
}

// ---- the tile ops

// s = q . kt: RB rows x KC vectors of keys per register block.
template <class V, int RB, int KC>
void scores(const float* q, int64_t rows, int64_t d, const float* kt, int64_t ldk, float* s) {
  // Key chunk outer: its slice of kt stays in L1 while every row block passes over it.
  for (int c0 = 0; c0 < kTileK; c0 += KC * V::kFloats)
    in_row_blocks<RB>(rows, [&](auto R, int64_t r) {
      tile_block<V, R, KC>(FloatProduct<V>{q + r * d, d, kt + c0, ldk}, d, s + r * kTileK + c0, kTileK, nullptr);
    });
}

// The online-softmax step of RB rows (s, m, l, alpha, p16 at the block's first row): each row's operations
// and their order are one row's alone; the rows of a block are interleaved so that one row's reductions
// (max, sum) overlap another's exps. p16 (kRound only, may be null): the rounded p also stored as bf16
// bits [rows][kTileK].
template <class V, bool kRound, int RB>
inline void softmax_block(float* s, float* m, float* l, float* alpha, uint16_t* p16) {
  using R = typename V::F;
  constexpr int n = kTileK / V::kFloats;
  const float neg_inf = -INFINITY;
  R x[RB][n];
  float m_new[RB];
  for (int b = 0; b < RB; ++b) {
    for (int i = 0; i < n; ++i) x[b][i] = V::loadu_ps(s + b * kTileK + i * V::kFloats);
    R mx = x[b][0];
    for (int i = 1; i < n; ++i) mx = V::max_ps(mx, x[b][i]);
    const float tile_max = V::hmax_ps(mx);
    m_new[b] = m[b] > tile_max ? m[b] : tile_max;
  }
  R sum[RB];
  for (int b = 0; b < RB; ++b) {
    float* sr = s + b * kTileK;
    sum[b] = V::zero_ps();
    if (m_new[b] == neg_inf) {  // nothing allowed so far in this row
      for (int i = 0; i < n; ++i) V::storeu_ps(sr + i * V::kFloats, V::zero_ps());
      if constexpr (kRound)
        if (p16)
          for (int j = 0; j < kTileK; ++j) p16[b * kTileK + j] = 0;
      continue;
    }
    const R mv = V::set1_ps(m_new[b]);
    for (int i = 0; i < n; ++i) {
      R e = simd::exp_ps<V>(V::sub_ps(x[b][i], mv));
      if constexpr (kRound) {
        e = simd::round_bf16<V>(e);
        if (p16) V::store_bf16(p16 + b * kTileK + i * V::kFloats, e);
      }
      if (!p16) V::storeu_ps(sr + i * V::kFloats, e);  // the bf16 tile ops read p16 only
      sum[b] = V::add_ps(sum[b], e);
    }
  }
  for (int b = 0; b < RB; ++b) {
    if (m_new[b] == neg_inf) {
      alpha[b] = 1.0f;
      continue;
    }
    // exp(0) is exactly 1: a row whose maximum did not move (most tiles past a row's first few) needs no exp.
    alpha[b] = m[b] == m_new[b] ? 1.0f : std::exp(m[b] - m_new[b]);
    l[b] = l[b] * alpha[b] + V::hsum_ps(sum[b]);
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

// o = o * alpha + p . v over nk keys: RB rows x DC vectors of the head dimension per register block.
// Needs d % V::kFloats == 0.
template <class V, int RB, int DC>
void pv(const float* p, int64_t rows, int64_t nk, const float* v, int64_t ldv, int64_t d, const float* alpha,
        float* o) {
  in_column_chunks<DC, V::kFloats>(d, [&](auto C, int64_t c0) {
    in_row_blocks<RB>(rows, [&](auto R, int64_t r) {
      tile_block<V, R, C>(FloatProduct<V>{p + r * kTileK, kTileK, v + c0, ldv}, nk, o + r * d + c0, d, alpha + r);
    });
  });
}

}  // namespace
}  // namespace attention
}  // namespace bitnet_onnx
