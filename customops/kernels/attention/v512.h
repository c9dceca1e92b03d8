// The AVX-512 vector type of the tile templates (simd_tiles.h), shared by avx512.cc and
// avx512bf16.cc; each includes it under its own flags (internal linkage: no copy is shared).
#pragma once

#include <immintrin.h>

#include <cstdint>

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
  // round_bf16 (attention.h) on 16 lanes, in AVX512F integer ops (no AVX512-BF16 needed).
  static reg round_bf16(reg x) {
    const __m512i u = _mm512_castps_si512(x);
    const __mmask16 denormal = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
    r = _mm512_mask_and_epi32(r, denormal, u, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  // x already bf16-valued: its high halves (vpmovdw).
  static void store_bf16(uint16_t* p, reg x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16)));
  }
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

}  // namespace
}  // namespace attention
}  // namespace bitnet_onnx
