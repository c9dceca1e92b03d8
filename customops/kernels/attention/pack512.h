// The bf16 paths' packing (Bf16TileOps::pack_k, pack_v, pack_q) in AVX512F: K transposed into pairs of the
// head dimension, V into pairs of keys, q scaled; every value rounded by simd::round_bf16, the bits of
// attention.h's bf16_bits (the driver's generic loops, which a plan without these ops runs). Included by
// avx512bf16.cc and amxbf16.cc under their own flags (internal linkage: no copy is shared).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "attention.h"
#include "simd/x86.h"

namespace bitnet_onnx {
namespace attention {
namespace {

// 16 floats -> their bf16 bits (round_bf16's high halves) in 16 words.
inline __m256i bf16_words(__m512 x) { return simd::Zmm::bf16_halves(simd::round_bf16<simd::Zmm>(x)); }

// 32 floats of one key (head dims c0 .. c0 + 31) -> 16 dwords, dword i = the pair (2i, 2i + 1).
inline __m512i bf16_pairs(const float* x) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(bf16_words(_mm512_loadu_ps(x))), bf16_words(_mm512_loadu_ps(x + 16)),
                            1);
}

// kt[((c / 2) * ldk + j) * 2 + c % 2] = bf16(k[j * ld + c]) for j < n, c < d (d even).
void pack_k(const float* k, int64_t ld, int64_t n, int64_t d, uint16_t* kt, int64_t ldk) {
  const int64_t d32 = d / 32 * 32, n16 = n / 16 * 16;
  for (int64_t j0 = 0; j0 < n16; j0 += 16)
    for (int64_t c0 = 0; c0 < d32; c0 += 32) {
      __m512i r[16];
      for (int jj = 0; jj < 16; ++jj) r[jj] = bf16_pairs(k + (j0 + jj) * ld + c0);
      simd::Zmm::transpose32(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(kt + ((c0 / 2 + i) * ldk + j0) * 2, r[i]);
    }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = j < n16 ? d32 : 0; c < d; ++c) kt[((c / 2) * ldk + j) * 2 + c % 2] = bf16_bits(k[j * ld + c]);
}

// vh[(j / 2) * d * 2 + c * 2 + j % 2] = bf16(v[j * ld + c]) for j < n, c < d (d % 16 == 0); an odd n leaves
// the last pair's second half as it was.
void pack_v(const float* v, int64_t ld, int64_t n, int64_t d, uint16_t* vh) {
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const float* a = v + j * ld;
    const float* b = a + ld;
    uint16_t* dst = vh + (j / 2) * d * 2;
    for (int64_t c = 0; c < d; c += 16) {
      const __m512i x = _mm512_castps_si512(simd::round_bf16<simd::Zmm>(_mm512_loadu_ps(a + c)));
      const __m512i y = _mm512_castps_si512(simd::round_bf16<simd::Zmm>(_mm512_loadu_ps(b + c)));
      _mm512_storeu_si512(dst + c * 2, _mm512_or_si512(_mm512_and_si512(y, hi), _mm512_srli_epi32(x, 16)));
    }
  }
  if (j < n)
    for (int64_t c = 0; c < d; ++c) vh[(j / 2) * d * 2 + c * 2] = bf16_bits(v[j * ld + c]);
}

// q16[r * d + c] = bf16(q[r * ld + c] * scale) for r < n, c < d (d % 16 == 0).
void pack_q(const float* q, int64_t ld, int64_t n, int64_t d, float scale, uint16_t* q16) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < d; c += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q16 + r * d + c),
                          bf16_words(_mm512_mul_ps(_mm512_loadu_ps(q + r * ld + c), sc)));
}

}  // namespace
}  // namespace attention
}  // namespace bitnet_onnx
