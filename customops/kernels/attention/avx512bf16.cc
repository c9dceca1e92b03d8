// AVX512-BF16 tile ops for Precision::kBf16: vdpbf16ps multiplies a pair of bf16 per 32-bit lane
// and adds both exact products to a float32 lane, so q.k and p.v run twice the products of the
// f32 FMA path per instruction (6 x 4 register blocks of 32 zmm registers, as avx512.cc, through
// simd_tiles.h's tile_block). The softmax is avx512.cc's, rounding p to bf16 (round_bf16) and
// storing it for p.v; packing of K, V and q is pack512.h's.
#include <immintrin.h>

#include <cstring>

#include "pack512.h"
#include "simd/x86.h"
#include "simd_tiles.h"

namespace bitnet_onnx {
namespace attention {
namespace {

using simd::Zmm;

constexpr int kRowBlock = 6;                        // rows per register block
constexpr int kKeyVectors = kTileK / Zmm::kFloats;  // 16 keys (32 bf16) per zmm of kt
constexpr int kHeadVectors = 4;                     // vectors of 16 head dims per p.v register block

// bf16 operands in pairs along the summed axis: a [rows][lda] bf16 (a pair broadcast at a time),
// b [n pairs][ldb][2] read 16 pairs at a time.
struct Bf16Product {
  using A = __m512bh;
  using B = __m512bh;
  const uint16_t* a;
  int64_t lda;
  const uint16_t* b;
  int64_t ldb;
  // 32 bits = one bf16 pair, broadcast to all 16 lanes.
  A row(int r, int64_t i) const {
    int32_t x;
    std::memcpy(&x, a + r * lda + 2 * i, sizeof x);
    return (__m512bh)_mm512_set1_epi32(x);
  }
  B col(int64_t i, int x) const { return (__m512bh)_mm512_loadu_si512(b + (i * ldb + x * Zmm::kFloats) * 2); }
  static Zmm::F madd(Zmm::F acc, A x, B y) { return _mm512_dpbf16_ps(acc, x, y); }
};

void scores(const uint16_t* q, int64_t rows, int64_t d, const uint16_t* kt, int64_t ldk, float* s) {
  in_row_blocks<kRowBlock>(rows, [&](auto R, int64_t r) {
    tile_block<Zmm, R, kKeyVectors>(Bf16Product{q + r * d, d, kt, ldk}, d / 2, s + r * kTileK, kTileK, nullptr);
  });
}

void softmax(float* s, int64_t rows, float* m, float* l, float* alpha, uint16_t* p) {
  softmax_step<Zmm, true, 4>(s, rows, m, l, alpha, p);
}

// Needs d % 16 == 0.
void pv(const uint16_t* p, int64_t rows, int64_t nk, const uint16_t* v, int64_t d, const float* alpha, float* o) {
  const int64_t pairs = (nk + 1) / 2;
  in_column_chunks<kHeadVectors, Zmm::kFloats>(d, [&](auto C, int64_t c0) {
    in_row_blocks<kRowBlock>(rows, [&](auto R, int64_t r) {
      tile_block<Zmm, R, C>(Bf16Product{p + r * kTileK, kTileK, v + c0 * 2, d}, pairs, o + r * d + c0, d, alpha + r);
    });
  });
}

const Bf16TileOps kAvx512Bf16 = {"avx512bf16", Zmm::kFloats, scores, softmax, pv, 1, pack_k, pack_v, pack_q};

}  // namespace

const Bf16TileOps* avx512bf16_tile_ops() { return &kAvx512Bf16; }

}  // namespace attention
}  // namespace bitnet_onnx
