// AVX-512 tile ops (16 floats a vector; 6 x 4 register blocks of 32 zmm registers).
#include <immintrin.h>

#include "simd_tiles.h"

namespace bitnet_onnx {
namespace attention {
namespace {

struct V512 {
  using reg = __m512;
  static constexpr int width = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg x) { _mm512_storeu_ps(p, x); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static float hmax(reg x) { return _mm512_reduce_max_ps(x); }
  static float hsum(reg x) { return _mm512_reduce_add_ps(x); }
  static reg exp(reg x) {
    const __mmask16 under = _mm512_cmp_ps_mask(x, set1(kExpLo), _CMP_LT_OQ);  // and -inf, NaN stays
    x = _mm512_min_ps(_mm512_max_ps(x, set1(kExpLo)), set1(88.0f));
    const reg fx = _mm512_roundscale_ps(mul(x, set1(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    reg r = _mm512_fnmadd_ps(fx, set1(kLn2Hi), x);
    r = _mm512_fnmadd_ps(fx, set1(kLn2Lo), r);
    const reg z = mul(r, r);
    reg y = set1(kExpP[0]);
    for (int i = 1; i < 6; ++i) y = fmadd(y, r, set1(kExpP[i]));
    y = fmadd(y, z, add(r, set1(1.0f)));
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~under), _mm512_scalef_ps(y, fx));
  }
};

const TileOps kAvx512 = {"avx512", V512::width, scores<V512, 6, 4>, softmax<V512>, pv<V512, 6, 4>};

}  // namespace

const TileOps* avx512_tile_ops() { return &kAvx512; }

}  // namespace attention
}  // namespace bitnet_onnx
