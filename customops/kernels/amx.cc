// AMX-INT8 kernel (Intel Sapphire Rapids and later). Compiled with -mamx-tile -mamx-int8 plus
// the AVX512 flags of avx512vnni.cc; usable only when amx_usable() (CPUID, XCR0 and, on Linux,
// the per-process permission for the tile data state) says so.
//
// Weights: the same 16-row panel layout as avx512vnni.cc. Per 32-row panel and 1024-column K
// block the 2-bit codes are unpacked once into an L1 buffer whose 1 KB pieces are AMX B tiles
// as they are ([16 quads][16 rows x 4 codes], u8); activation rows q are A tiles (s8, read in
// place, stride K). TDPBSUD (signed A x unsigned B) then gives sum_k q*c into 16x16 int32 tiles;
// minus qsum it is sum_k q*T. Register blocking 2x2: tiles 0-3 accumulate 32 tokens x 32 rows,
// 4-5 hold A, 6-7 hold B. Token blocks of fewer than 16 rows go to the AVX512-VNNI kernel.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <cpuid.h>

#include "i2s_kernel.h"
#include "x86_common.h"

namespace bitnet_onnx {
namespace {

using namespace x86;

constexpr int64_t G = 16;       // rows per group = columns of a C tile
constexpr int64_t kTm = 16;     // tokens per A / C tile
constexpr int64_t kKc = 1024;   // K block: B buffer of 2 groups = 2 x 16 KB
constexpr int64_t kKStep = 64;  // K bytes per A tile row

// ---------------------------------------------------------------------------------------------
// Availability

bool cpu_has_amx_int8() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1)) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool tile = (edx >> 24) & 1, int8 = (edx >> 25) & 1;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const bool os_tiles = (lo & (3u << 17)) == (3u << 17);  // XTILECFG + XTILEDATA
  return tile && int8 && os_tiles;
}

// Linux hands out the 8 KB tile data state only after a per-process request.
bool os_permits_tiles() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// ---------------------------------------------------------------------------------------------
// Integer sums

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Eight 16 x 64-byte tiles.
void load_tile_config() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

// Group codes over columns [k0, k0 + kc) as bytes, [quad][16 rows x 4]: consecutive B tiles.
void unpack_group(const uint8_t* grp, int64_t k0, int64_t kc, uint8_t* buf) {
  const __m512i mask3 = _mm512_set1_epi8(3);
  const uint8_t* src = grp + (k0 / kSpan) * 64;
  for (int64_t sp = 0; sp < kc / kSpan; ++sp) {
    const __m512i p = _mm512_loadu_si512(src + sp * 64);
    uint8_t* dst = buf + sp * 4 * 64;
    _mm512_store_si512(dst, _mm512_and_si512(p, mask3));
    _mm512_store_si512(dst + 64, _mm512_and_si512(_mm512_srli_epi16(p, 2), mask3));
    _mm512_store_si512(dst + 128, _mm512_and_si512(_mm512_srli_epi16(p, 4), mask3));
    _mm512_store_si512(dst + 192, _mm512_and_si512(_mm512_srli_epi16(p, 6), mask3));
  }
}

// Lanes of group g inside [n0, n1).
inline __mmask16 lane_mask(int64_t g, int64_t n0, int64_t n1) {
  const int64_t lo = std::max<int64_t>(n0 - g * G, 0), hi = std::min<int64_t>(n1 - g * G, G);
  return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

// One 16x16 C tile (in c, row-major) -> out rows, adding what an earlier K block left there and
// subtracting qsum after the last one.
inline void emit_tile(const int32_t* c, int32_t* dst, int64_t ld, __mmask16 mask, const int32_t* qsum, bool first,
                      bool last) {
  for (int t = 0; t < kTm; ++t, dst += ld) {
    __m512i v = _mm512_load_si512(c + t * 16);
    if (!first) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(mask, dst));
    if (last) v = _mm512_sub_epi32(v, _mm512_set1_epi32(qsum[t]));
    _mm512_mask_storeu_epi32(dst, mask, v);
  }
}

struct Block {  // one K block of a panel: where A, B and C live
  const int8_t* q;  // activations of the first token, column k0
  int64_t ldq;
  const uint8_t* b[2];  // B tiles of the panel's groups (b[1] unused for one group)
  int64_t kc;
  int32_t* out;  // out element (first token, first column of group 0)
  int64_t ld;
  const int32_t* qsum;
  __mmask16 mask[2];
  bool first, last;
};

// MB token tiles (1 or 2) x NG groups (1 or 2); C tiles 0..3 = (token tile i, group j) -> 2i + j.
template <int MB, int NG>
void micro(const Block& blk) {
  alignas(64) int32_t c[4][kTm * G];
  _tile_zero(0);
  if (NG > 1) _tile_zero(1);
  if (MB > 1) _tile_zero(2);
  if (MB > 1 && NG > 1) _tile_zero(3);
  for (int64_t kk = 0; kk < blk.kc; kk += kKStep) {
    const uint8_t* b0 = blk.b[0] + kk * G;  // kKStep columns = 16 quads x 64 bytes
    _tile_loadd(4, blk.q + kk, blk.ldq);
    _tile_loadd(6, b0, 64);
    _tile_dpbsud(0, 4, 6);
    if (NG > 1) {
      _tile_loadd(7, blk.b[1] + kk * G, 64);
      _tile_dpbsud(1, 4, 7);
    }
    if (MB > 1) {
      _tile_loadd(5, blk.q + kTm * blk.ldq + kk, blk.ldq);
      _tile_dpbsud(2, 5, 6);
      if (NG > 1) _tile_dpbsud(3, 5, 7);
    }
  }
  _tile_stored(0, c[0], 64);
  if (NG > 1) _tile_stored(1, c[1], 64);
  if (MB > 1) _tile_stored(2, c[2], 64);
  if (MB > 1 && NG > 1) _tile_stored(3, c[3], 64);
  for (int i = 0; i < MB; ++i)
    for (int j = 0; j < NG; ++j)
      emit_tile(c[2 * i + j], blk.out + i * kTm * blk.ld + j * G, blk.ld, blk.mask[j], blk.qsum + i * kTm, blk.first,
                blk.last);
}

void dot(const uint8_t* packed, int64_t n, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1, int64_t n0,
         int64_t n1, int32_t* out, int64_t ld) {
  if (m1 <= m0 || n1 <= n0) return;
  const int64_t tiled_m = (m1 - m0) / kTm * kTm;  // tokens in whole A tiles
  if (tiled_m < m1 - m0)  // leftover rows (and all of a small M): the VNNI kernel
    avx512vnni_kernel()->dot(packed, n, k, rows, m0 + tiled_m, m1, n0, n1, out + tiled_m * ld, ld);
  if (tiled_m == 0) return;
  const int64_t me = m0 + tiled_m;

  load_tile_config();
  alignas(64) uint8_t buf[2][kKc * G];
  const int64_t gstride = group_stride(k, G);
  const int64_t g0 = n0 / G, g1 = panel_groups(n1, G);
  for (int64_t k0 = 0; k0 < k; k0 += kKc) {
    const int64_t kc = std::min(kKc, k - k0);
    for (int64_t g = g0; g < g1; g += 2) {
      const int ng = g + 1 < g1 ? 2 : 1;
      for (int j = 0; j < ng; ++j) unpack_group(packed + (g + j) * gstride, k0, kc, buf[j]);
      Block blk;
      blk.ldq = k;
      blk.b[0] = buf[0];
      blk.b[1] = buf[1];
      blk.kc = kc;
      blk.ld = ld;
      blk.first = k0 == 0;
      blk.last = k0 + kc == k;
      for (int j = 0; j < 2; ++j) blk.mask[j] = j < ng ? lane_mask(g + j, n0, n1) : 0;
      for (int64_t i = m0; i < me; i += 2 * kTm) {
        const int mb = i + 2 * kTm <= me ? 2 : 1;
        blk.q = rows.q + i * k + k0;
        blk.out = out + (i - m0) * ld + (g * G - n0);
        blk.qsum = rows.qsum + i;
        if (mb == 2)
          ng == 2 ? micro<2, 2>(blk) : micro<2, 1>(blk);
        else
          ng == 2 ? micro<1, 2>(blk) : micro<1, 1>(blk);
      }
    }
  }
  _tile_release();  // the OS need not save tile state for this thread any more
}

size_t packed_bytes(int64_t n, int64_t k) { return panel_bytes(n, k, G); }

void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) { repack_panels<G>(i2s, n, k, packed); }

const I2SKernel kAmx = {"amx", packed_bytes, repack, quantize_zmm, dot, /*tile_m=*/256, /*tile_n=*/256};

}  // namespace

bool amx_usable() {
  static const bool usable = cpu_has_amx_int8() && os_permits_tiles();
  return usable;
}

const I2SKernel* amx_kernel() { return &kAmx; }

}  // namespace bitnet_onnx
