// AMX-INT8 kernel (Intel Sapphire Rapids and later). Compiled with -mamx-tile -mamx-int8 plus
// the AVX512 flags of avx512vnni.cc; selected only when cpu_features().amx (CPUID, XCR0 and, on
// Linux, the per-process permission for the tile data state) says so.
//
// Weights: the same 16-row panel layout as avx512vnni.cc. Per 1024-column K block, the 2-bit
// codes of the tile's rows are unpacked once into a per-thread buffer of int8 T whose 1 KB
// pieces are AMX B tiles as they are ([16 quads][16 rows x 4 values]); each token pair's rows of
// q are copied into contiguous A tiles. TDPBSSD accumulates sum_k q*T in 16x16 int32 tiles.
// Register blocking 2x2: tiles 0-3 hold 32 tokens x 32 rows of C, 4-5 A, 6-7 B. C leaves
// through an L1 staging tile (int32 partials for the next K block, or the fused epilogue's
// floats). Token blocks of fewer than 16 rows go to the AVX512-VNNI kernel.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "amx_tiles.h"
#include "mul_kernels.h"
#include "x86_common.h"

// Stage switches and counters for customops/tests/amx_profile.cc, which includes this file with its own
// definitions to time the kernel with stages left out; in the library every stage runs.
#ifndef BITNET_AMX_RUN
#define BITNET_AMX_RUN(stage) true
#define BITNET_AMX_COUNT(counter, n) ((void)0)
#endif

namespace bitnet_onnx {
namespace {

using namespace x86;

constexpr int64_t G = 16;       // rows per group = columns of a C tile
constexpr int64_t kTm = 16;     // tokens per A / C tile
constexpr int64_t kKc = 1024;   // K block: B buffer of 2 groups = 2 x 16 KB
constexpr int64_t kKStep = 64;  // K bytes per A tile row
// Outputs from this size on are written with streaming stores: measured here (2 MiB L2, shared
// L3) at M=2048 (8-25 MB per projection) 1.5x faster overall, at M=512 (2-6 MB) 2x slower.
constexpr int64_t kStreamBytes = int64_t{8} << 20;

// ---------------------------------------------------------------------------------------------
// Integer sums

// Group values T = code - 1 over columns [k0, k0 + kc) as int8, [quad][16 rows x 4]: one B
// tile per 64 columns. Signed T lets TDPBSSD give sum q*T directly (no qsum correction).
void unpack_group(const uint8_t* grp, int64_t k0, int64_t kc, int8_t* buf) {
  const __m512i mask3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
  const uint8_t* src = grp + (k0 / kSpan) * 64;
  for (int64_t sp = 0; sp < kc / kSpan; ++sp) {
    const __m512i p = _mm512_loadu_si512(src + sp * 64);
    int8_t* dst = buf + sp * 4 * 64;
    _mm512_store_si512(dst, _mm512_sub_epi8(_mm512_and_si512(p, mask3), one));
    _mm512_store_si512(dst + 64, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(p, 2), mask3), one));
    _mm512_store_si512(dst + 128, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(p, 4), mask3), one));
    _mm512_store_si512(dst + 192, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(p, 6), mask3), one));
  }
}

// Lanes of group g inside [n0, n1).
inline __mmask16 lane_mask(int64_t g, int64_t n0, int64_t n1) {
  const int64_t lo = std::max<int64_t>(n0 - g * G, 0), hi = std::min<int64_t>(n1 - g * G, G);
  return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

// C tiles of a micro call that are not whole 16-column groups of the output go through a
// staging buffer with masked loads / stores; whole ones are loaded / stored in place.
struct Stage {
  alignas(64) int32_t c[4][kTm * G];
};

inline void stage_in(int32_t* c, const int32_t* src, int64_t ld, __mmask16 mask, bool first) {
  for (int t = 0; t < kTm; ++t)
    _mm512_store_si512(c + t * G, first ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi32(mask, src + t * ld));
}

// a != null: last K block with the op's epilogue fused, y = (float(sum) / a) * s_w per row.
inline void stage_out(const int32_t* c, int32_t* dst, int64_t ld, __mmask16 mask, const float* a, float s_w,
                      bool may_stream) {
  if (!BITNET_AMX_RUN(epilogue)) return;
  if (a == nullptr) {
    for (int t = 0; t < kTm; ++t) _mm512_mask_storeu_epi32(dst + t * ld, mask, _mm512_load_si512(c + t * G));
    return;
  }
  const __m512 sw = _mm512_set1_ps(s_w);
  // Whole aligned lines of a large output are streamed (no read-for-ownership of y).
  const bool stream = may_stream && mask == 0xFFFF && (reinterpret_cast<uintptr_t>(dst) & 63) == 0 && (ld & 15) == 0;
  for (int t = 0; t < kTm; ++t) {
    const __m512 f = _mm512_cvtepi32_ps(_mm512_load_si512(c + t * G));
    const __m512 y = _mm512_mul_ps(_mm512_div_ps(f, _mm512_set1_ps(a[t])), sw);
    if (stream)
      _mm512_stream_ps(reinterpret_cast<float*>(dst + t * ld), y);
    else
      _mm512_mask_storeu_ps(dst + t * ld, mask, y);
  }
}

struct Block {  // one K block of one (token pair, group pair): where A, B and C live
  const int8_t* q;  // the token pair's activations over the K block, packed by pack_tokens
  const int8_t* b[2];  // B tiles of the two groups (b[1] unused for one group)
  int64_t kc;
  int32_t* out;  // out element (first token, first column of group 0)
  int64_t ld;
  __mmask16 mask[2];
  bool first;      // first K block: C starts at zero
  const float* a;  // last K block with the fused epilogue: a of the first token (else null)
  float s_w;
  bool stream;  // final float output too large to stay in cache: write it with streaming stores
};

// C tile (i, j) of token tile i and group j is tile 2i + j; its output and staging slot.
#define BITNET_C_IN(T, I, J)                                                                     \
  do {                                                                                           \
    int32_t* dst = blk.out + (I) * kTm * blk.ld + (J) * G;                                       \
    if (blk.first) {                                                                             \
      _tile_zero(T);                                                                             \
    } else if (whole) {                                                                          \
      _tile_loadd(T, dst, blk.ld * 4);                                                           \
    } else {                                                                                     \
      stage_in(st.c[T], dst, blk.ld, blk.mask[J], false);                                        \
      _tile_loadd(T, st.c[T], 64);                                                               \
    }                                                                                            \
  } while (0)
// Stored through an L1-resident staging tile: a tile store straight into the output rows (1 KB
// apart, a few L1 sets) stalled on their misses; plain vector stores drain in the background.
#define BITNET_C_OUT(T, I, J)                                                                    \
  do {                                                                                           \
    _tile_stored(T, st.c[T], 64);                                                                \
    stage_out(st.c[T], blk.out + (I) * kTm * blk.ld + (J) * G, blk.ld, blk.mask[J],                \
              blk.a ? blk.a + (I) * kTm : nullptr, blk.s_w, blk.stream);                          \
  } while (0)

// MB token tiles (1 or 2) x NG groups (1 or 2): tiles 0-3 C, 4-5 A, 6-7 B.
template <int MB, int NG>
void micro(const Block& blk) {
  Stage st;
  const bool whole = blk.mask[0] == 0xFFFF && (NG == 1 || blk.mask[1] == 0xFFFF);
  BITNET_C_IN(0, 0, 0);
  if (NG > 1) BITNET_C_IN(1, 0, 1);
  if (MB > 1) BITNET_C_IN(2, 1, 0);
  if (MB > 1 && NG > 1) BITNET_C_IN(3, 1, 1);
  BITNET_AMX_COUNT(tdp, blk.kc / kKStep * MB * NG);
  for (int64_t kk = 0; BITNET_AMX_RUN(tiles) && kk < blk.kc; kk += kKStep) {
    const int8_t* a = blk.q + kk * 2 * kTm;  // packed: [k step][32 tokens][64]
    _tile_loadd(4, a, 64);
    _tile_loadd(6, blk.b[0] + kk * G, 64);  // kKStep columns = 16 quads x 64 bytes
    _tile_dpbssd(0, 4, 6);
    if (NG > 1) {
      _tile_loadd(7, blk.b[1] + kk * G, 64);
      _tile_dpbssd(1, 4, 7);
    }
    if (MB > 1) {
      _tile_loadd(5, a + kTm * 64, 64);
      _tile_dpbssd(2, 5, 6);
      if (NG > 1) _tile_dpbssd(3, 5, 7);
    }
  }
  BITNET_C_OUT(0, 0, 0);
  if (NG > 1) BITNET_C_OUT(1, 0, 1);
  if (MB > 1) BITNET_C_OUT(2, 1, 0);
  if (MB > 1 && NG > 1) BITNET_C_OUT(3, 1, 1);
}
#undef BITNET_C_IN
#undef BITNET_C_OUT

// Activation rows [rows x kc] (stride ldq) -> contiguous A tiles [kc / 64][rows][64]: each tile
// load then reads 1 KB in sequence instead of 16 lines at a K-byte stride (few L1 sets).
void pack_tokens(const int8_t* q, int64_t ldq, int64_t rows, int64_t kc, int8_t* apack) {
  for (int64_t kk = 0; kk < kc; kk += kKStep)
    for (int64_t r = 0; r < rows; ++r)
      _mm512_store_si512(apack + (kk / kKStep) * 2 * kTm * 64 + r * 64, _mm512_loadu_si512(q + r * ldq + kk));
}

// Per-thread B buffer for all groups of a tile over one K block (grown once, 64-byte aligned).
int8_t* b_buffer(size_t bytes) {
  thread_local std::vector<int8_t> storage;
  if (storage.size() < bytes + 64) storage.resize(bytes + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(storage.data());
  return reinterpret_cast<int8_t*>((p + 63) & ~uintptr_t{63});
}

struct Scale {  // fused epilogue: per-token a and the weight scale
  const float* a;
  float s_w;
};

void dot_any(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1,
             int64_t n0, int64_t n1, int32_t* out, int64_t ld, const Scale* sc) {
  if (m1 <= m0 || n1 <= n0) return;
  const int64_t tiled_m = (m1 - m0) / kTm * kTm;  // tokens in whole A tiles
  if (tiled_m < m1 - m0) {  // leftover rows (and all of a small M): the VNNI kernel
    if (sc)
      avx512vnni_kernel()->dot_scaled(packed, n, k, rows, sc->s_w, m0 + tiled_m, m1, n0, n1,
                                      reinterpret_cast<float*>(out + tiled_m * ld), ld);
    else
      avx512vnni_kernel()->dot(packed, n, k, rows, m0 + tiled_m, m1, n0, n1, out + tiled_m * ld, ld);
  }
  if (tiled_m == 0) return;
  const int64_t me = m0 + tiled_m;
  const int64_t gstride = group_stride(k, G);
  const int64_t g0 = n0 / G, g1 = panel_groups(n1, G);
  const int64_t kc_max = std::min(kKc, k);
  int8_t* buf = b_buffer(static_cast<size_t>((g1 - g0) * kc_max * G));
  alignas(64) int8_t apack[2 * kTm * kKc];

  load_amx_tile_config();
  // B streams from L2 (sequential 1 KB tiles); the A tiles of a token pair stay in L1.
  for (int64_t k0 = 0; k0 < k; k0 += kKc) {
    const int64_t kc = std::min(kKc, k - k0);
    for (int64_t g = g0; g < g1; ++g) {
      if (BITNET_AMX_RUN(decode)) unpack_group(packed + g * gstride, k0, kc, buf + (g - g0) * kc * G);
      BITNET_AMX_COUNT(decoded_bytes, kc * G);
    }
    for (int64_t i = m0; i < me; i += 2 * kTm) {
      const int mb = i + 2 * kTm <= me ? 2 : 1;
      if (BITNET_AMX_RUN(pack)) pack_tokens(rows.q + i * k + k0, k, mb * kTm, kc, apack);
      for (int64_t g = g0; g < g1; g += 2) {
        const int ng = g + 1 < g1 ? 2 : 1;
        Block blk;
        blk.q = apack;
        blk.b[0] = buf + (g - g0) * kc * G;
        blk.b[1] = blk.b[0] + kc * G;
        blk.kc = kc;
        blk.out = out + (i - m0) * ld + (g * G - n0);
        blk.ld = ld;
        for (int j = 0; j < 2; ++j) blk.mask[j] = j < ng ? lane_mask(g + j, n0, n1) : 0;
        blk.first = k0 == 0;
        blk.a = sc && k0 + kc == k ? sc->a + i : nullptr;
        blk.s_w = sc ? sc->s_w : 0.0f;
        blk.stream = sc && rows.m * n * 4 >= kStreamBytes;
        if (mb == 2)
          ng == 2 ? micro<2, 2>(blk) : micro<2, 1>(blk);
        else
          ng == 2 ? micro<1, 2>(blk) : micro<1, 1>(blk);
      }
    }
  }
  _tile_release();  // the OS need not save tile state for this thread any more
  _mm_sfence();     // streaming stores are weakly ordered: publish y before the caller syncs
}

void dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1, int64_t n0,
         int64_t n1, int32_t* out, int64_t ld) {
  dot_any(packed, n, k, rows, m0, m1, n0, n1, out, ld, nullptr);
}

size_t packed_bytes(int64_t n, int64_t k) { return panel_bytes(n, k, G); }

void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) { repack_panels<G>(i2s, n, k, packed); }

// dot() with the op's epilogue fused: y[(i - m0) * ldy + (j - n0)] = (float(sum) / rows.a[i]) * s_w.
void dot_scaled(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, float s_w, int64_t m0,
                int64_t m1, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const Scale sc{rows.a, s_w};
  dot_any(packed, n, k, rows, m0, m1, n0, n1, reinterpret_cast<int32_t*>(y), ldy, &sc);
}

// 512 x 512 tiles: B unpacked once per 512 tokens, A re-read once per 512 rows (+15-25% over 256).
const I2SKernel kAmx = {"amx", packed_bytes, repack, quantize<Zmm>, dot, /*tile_m=*/512, /*tile_n=*/512, dot_scaled};

}  // namespace

const I2SKernel* amx_kernel() { return &kAmx; }

}  // namespace bitnet_onnx
