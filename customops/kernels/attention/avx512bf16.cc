// AVX512-BF16 tile ops for Precision::kBf16: vdpbf16ps multiplies a pair of bf16 per 32-bit lane
// and adds both exact products to a float32 lane, so q.k and p.v run twice the products of the
// f32 FMA path per instruction (6 x 4 register blocks of 32 zmm registers, as avx512.cc). The
// softmax is avx512.cc's, rounding p to bf16 (round_bf16) and storing it for p.v; packing of K, V and q
// is pack512.h's.
#include <immintrin.h>

#include <cstring>

#include "pack512.h"
#include "v512.h"

namespace bitnet_onnx {
namespace attention {
namespace {

constexpr int kKeyVectors = kTileK / 16;  // 16 keys (32 bf16) per zmm of kt

// 32 bits = one bf16 pair, broadcast to all 16 lanes.
inline __m512bh pair(const uint16_t* p) {
  int32_t x;
  std::memcpy(&x, p, sizeof x);
  return (__m512bh)_mm512_set1_epi32(x);
}
inline __m512bh load_bh(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

template <int RB>
inline void scores_block(const uint16_t* q, int64_t d, const uint16_t* kt, int64_t ldk, float* s) {
  __m512 acc[RB][kKeyVectors];
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < kKeyVectors; ++x) acc[r][x] = _mm512_setzero_ps();
  for (int64_t c2 = 0; c2 < d / 2; ++c2) {
    __m512bh kv[kKeyVectors];
    for (int x = 0; x < kKeyVectors; ++x) kv[x] = load_bh(kt + (c2 * ldk + x * 16) * 2);
    for (int r = 0; r < RB; ++r) {
      const __m512bh qb = pair(q + r * d + 2 * c2);
      for (int x = 0; x < kKeyVectors; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], qb, kv[x]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < kKeyVectors; ++x) _mm512_storeu_ps(s + r * kTileK + x * 16, acc[r][x]);
}

template <int RB>
void scores_tail(int64_t n, const uint16_t* q, int64_t d, const uint16_t* kt, int64_t ldk, float* s) {
  if constexpr (RB > 1) {
    if (n == RB - 1) return scores_block<RB - 1>(q, d, kt, ldk, s);
    scores_tail<RB - 1>(n, q, d, kt, ldk, s);
  }
}

void scores(const uint16_t* q, int64_t rows, int64_t d, const uint16_t* kt, int64_t ldk, float* s) {
  constexpr int RB = 6;
  int64_t r = 0;
  for (; r + RB <= rows; r += RB) scores_block<RB>(q + r * d, d, kt, ldk, s + r * kTileK);
  if (r < rows) scores_tail<RB>(rows - r, q + r * d, d, kt, ldk, s + r * kTileK);
}

void softmax(float* s, int64_t rows, float* m, float* l, float* alpha, uint16_t* p) {
  softmax_step<V512, true, 4>(s, rows, m, l, alpha, p);
}

// RB rows x DC vectors (16 floats) of the head dimension, over key pairs.
template <int RB, int DC>
inline void pv_block(const uint16_t* p, int64_t pairs, const uint16_t* v, int64_t d, const float* alpha, float* o) {
  __m512 acc[RB][DC];
  for (int r = 0; r < RB; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
    for (int x = 0; x < DC; ++x) acc[r][x] = _mm512_mul_ps(_mm512_loadu_ps(o + r * d + x * 16), a);
  }
  for (int64_t t = 0; t < pairs; ++t) {
    __m512bh vv[DC];
    for (int x = 0; x < DC; ++x) vv[x] = load_bh(v + (t * d + x * 16) * 2);
    for (int r = 0; r < RB; ++r) {
      const __m512bh pb = pair(p + r * kTileK + 2 * t);
      for (int x = 0; x < DC; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], pb, vv[x]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < DC; ++x) _mm512_storeu_ps(o + r * d + x * 16, acc[r][x]);
}

template <int RB, int DC>
void pv_tail(int64_t n, const uint16_t* p, int64_t pairs, const uint16_t* v, int64_t d, const float* alpha,
             float* o) {
  if constexpr (RB > 1) {
    if (n == RB - 1) return pv_block<RB - 1, DC>(p, pairs, v, d, alpha, o);
    pv_tail<RB - 1, DC>(n, p, pairs, v, d, alpha, o);
  }
}

template <int RB, int DC>
void pv_rows(const uint16_t* p, int64_t rows, int64_t pairs, const uint16_t* v, int64_t d, const float* alpha,
             float* o, int64_t c0) {
  int64_t r = 0;
  for (; r + RB <= rows; r += RB) pv_block<RB, DC>(p + r * kTileK, pairs, v + c0 * 2, d, alpha + r, o + r * d + c0);
  if (r < rows) pv_tail<RB, DC>(rows - r, p + r * kTileK, pairs, v + c0 * 2, d, alpha + r, o + r * d + c0);
}

// Needs d % 16 == 0. Head-dimension chunk outer: its slice of the v tile stays in L1.
void pv(const uint16_t* p, int64_t rows, int64_t nk, const uint16_t* v, int64_t d, const float* alpha, float* o) {
  constexpr int RB = 6, DC = 4;
  const int64_t pairs = (nk + 1) / 2;
  int64_t c0 = 0;
  for (; c0 + DC * 16 <= d; c0 += DC * 16) pv_rows<RB, DC>(p, rows, pairs, v, d, alpha, o, c0);
  for (; c0 < d; c0 += 16) pv_rows<RB, 1>(p, rows, pairs, v, d, alpha, o, c0);
}

const Bf16TileOps kAvx512Bf16 = {"avx512bf16", 16, scores, softmax, pv, 1, pack_k, pack_v, pack_q};

}  // namespace

const Bf16TileOps* avx512bf16_tile_ops() { return &kAvx512Bf16; }

}  // namespace attention
}  // namespace bitnet_onnx
