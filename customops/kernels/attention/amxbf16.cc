// AMX-BF16 tile ops for Precision::kBf16 (Intel Sapphire Rapids and later): TDPBF16PS multiplies a
// 16 x 32 bf16 tile by a 32 x 16 one (in pairs along the summed axis) into 16 x 16 float32, 8192
// products per instruction where vdpbf16ps does 32 (on Sapphire Rapids vdpbf16ps runs no more
// products per cycle than float32 FMAs: AVX512-BF16 alone does not speed attention up there).
// Operand layouts are Bf16TileOps' (the B tiles are kt's and v's pair rows as they are); the
// driver pads q, p and o to whole 16-row tiles (Bf16TileOps::row_multiple). Softmax: avx512's;
// packing of K, V and q: pack512.h's.
#include <immintrin.h>

#include <cstring>

#include "amx_tiles.h"
#include "pack512.h"
#include "simd/x86.h"
#include "simd_tiles.h"

namespace bitnet_onnx {
namespace attention {
namespace {

using simd::Zmm;

// s[rows16][64] = q[rows16][d] . k^T: C tiles 0-3 (16 keys each), A tile 4 (16 rows x 32 of d),
// B tiles 5-7 (16 pairs of d x 16 keys, row stride ldk pairs). Needs d % 32 == 0, rows % 16 == 0.
void scores(const uint16_t* q, int64_t rows, int64_t d, const uint16_t* kt, int64_t ldk, float* s) {
  load_amx_tile_config();
  const size_t q_stride = static_cast<size_t>(d) * 2, k_stride = static_cast<size_t>(ldk) * 4;
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t c0 = 0; c0 < d; c0 += 32) {
      _tile_loadd(4, q + r0 * d + c0, q_stride);
      const uint16_t* b = kt + (c0 / 2) * ldk * 2;
      _tile_loadd(5, b, k_stride);
      _tile_dpbf16ps(0, 4, 5);
      _tile_loadd(6, b + 32, k_stride);
      _tile_dpbf16ps(1, 4, 6);
      _tile_loadd(7, b + 64, k_stride);
      _tile_dpbf16ps(2, 4, 7);
      _tile_loadd(5, b + 96, k_stride);
      _tile_dpbf16ps(3, 4, 5);
    }
    float* out = s + r0 * kTileK;
    _tile_stored(0, out, kTileK * 4);
    _tile_stored(1, out + 16, kTileK * 4);
    _tile_stored(2, out + 32, kTileK * 4);
    _tile_stored(3, out + 48, kTileK * 4);
  }
}

void softmax(float* s, int64_t rows, float* m, float* l, float* alpha, uint16_t* p) {
  softmax_step<Zmm, true, 4>(s, rows, m, l, alpha, p);
}

// o[rows16][d] = o * alpha + p[rows16][64] . v: o scaled by alpha in zmm first (rows only: the padding
// rows of o stay 0, their p is 0), then per 64 columns of d: C tiles 0-3 loaded from o, A tiles 4, 5
// (keys 0-31, 32-63 of p), B tiles 6, 7 (16 key pairs x 16 of d, row stride d pairs). All 64 keys
// are read: p is 0 past nk and v is finite there (the driver pads v16 by a tile).
void pv(const uint16_t* p, int64_t rows, int64_t nk, const uint16_t* v, int64_t d, const float* alpha, float* o) {
  (void)nk;
  for (int64_t r = 0; r < rows; ++r) {
    if (alpha[r] == 1.0f) continue;
    const Zmm::F a = Zmm::set1_ps(alpha[r]);
    for (int64_t c = 0; c < d; c += Zmm::kFloats) Zmm::storeu_ps(o + r * d + c, Zmm::mul_ps(Zmm::loadu_ps(o + r * d + c), a));
  }
  load_amx_tile_config();
  const int64_t rows16 = (rows + 15) / 16 * 16;
  const size_t o_stride = static_cast<size_t>(d) * 4, p_stride = kTileK * 2, v_stride = static_cast<size_t>(d) * 4;
  for (int64_t r0 = 0; r0 < rows16; r0 += 16) {
    float* orow = o + r0 * d;
    const uint16_t* prow = p + r0 * kTileK;
    _tile_loadd(4, prow, p_stride);
    _tile_loadd(5, prow + 32, p_stride);
    for (int64_t c0 = 0; c0 < d; c0 += 64) {
      const int nc = static_cast<int>(d - c0 >= 64 ? 4 : (d - c0) / 16);
      // Tile numbers are immediates: the four C tiles spelled out, the last ones only if d has them.
#define BITNET_PV_TILE(T)                                                         \
  if (nc > T) {                                                                   \
    _tile_loadd(T, orow + c0 + 16 * T, o_stride);                                 \
    _tile_loadd(6, v + (c0 + 16 * T) * 2, v_stride);                              \
    _tile_dpbf16ps(T, 4, 6);                                                      \
    _tile_loadd(7, v + (16 * d + c0 + 16 * T) * 2, v_stride);                     \
    _tile_dpbf16ps(T, 5, 7);                                                      \
    _tile_stored(T, orow + c0 + 16 * T, o_stride);                                \
  }
      BITNET_PV_TILE(0)
      BITNET_PV_TILE(1)
      BITNET_PV_TILE(2)
      BITNET_PV_TILE(3)
#undef BITNET_PV_TILE
    }
  }
}

const Bf16TileOps kAmxBf16 = {"amxbf16", 32, scores, softmax, pv, 16, pack_k, pack_v, pack_q};

}  // namespace

const Bf16TileOps* amxbf16_tile_ops() { return &kAmxBf16; }

}  // namespace attention
}  // namespace bitnet_onnx
