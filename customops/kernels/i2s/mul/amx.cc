// AMX-INT8 kernel (Intel Sapphire Rapids and later). Compiled with -mamx-tile -mamx-int8 plus
// the AVX512 flags of avx512vnni.cc; selected only when cpu_features().amx (CPUID, XCR0 and, on
// Linux, the per-process permission for the tile data state) says so.
//
// Weights: the same 16-row panel layout as avx512vnni.cc, decoded to int8 T whose 1 KB pieces are
// AMX B tiles as they are ([16 quads][16 rows x 4 values]); token rows of q are copied into
// contiguous A tiles. TDPBSSD accumulates sum_k q*T in 16x16 int32 tiles; register blocking 2x2:
// tiles 0-3 hold 32 tokens x 32 rows of C, 4-5 A, 6-7 B.
// Loop order (issue 40): per K block (the whole K of every real model), the job's tokens are packed
// once; then group pairs outer, token pairs inner: each pair of 16-row groups is decoded once per
// kernel call (one job of the driver: up to tile_m = 512 tokens, so an op call of M tokens decodes
// each pair ceil(M / 512) times) into a per-thread slot and swept over every token pair, with C kept in tiles over the whole
// block (with a single token pair, whose B tiles are each used once, they are decoded just ahead of
// their use into an L1 ring instead). Beside each micro call's tdpbssd run the epilogue of the
// previous call's C (staged in L1) and, during a group pair's first call, the decode of the next
// pair, so that the divider and the vector units work while the tile unit does; the lines of Y a
// call will store are prefetched for writing during it. Token blocks of fewer than 16 rows go to the
// AVX512-VNNI kernel. Per-thread scratch: 64 x min(K, 4096) bytes of decoded weights (two slots of
// a group pair) and 32 x min(K, 4096) bytes per token pair of the job (tile_m = 512 tokens: up to
// 2 MB).
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 intrinsic headers (bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "amx_tiles.h"
#include "i2s_panel/layout.h"
#include "mul_kernels.h"
#include "simd/x86.h"
#include "x86_quantize.h"

// Stage switches and counters for customops/tests/amx_profile.cc, which includes this file with its own
// definitions to time the kernel with stages left out; in the library every stage runs.
#ifndef BITNET_AMX_RUN
#define BITNET_AMX_RUN(stage) true
#define BITNET_AMX_COUNT(counter, n) ((void)0)
#endif

namespace bitnet_onnx::i2s::mul {
namespace {

using namespace x86;
using namespace i2s_panel;
using simd::Zmm;

constexpr int64_t G = 16;       // rows per group = columns of a C tile
constexpr int64_t kTm = 16;     // tokens per A / C tile
constexpr int64_t kKStep = 64;  // K bytes per A tile row
// K block: C stays in tiles across a whole block. Every real model's K (<= 3072) is one block; a
// wider K runs in blocks whose int32 partial sums go through the output (the op's K reaches 2^24),
// which bounds the per-thread buffers at 64 x kKBlock bytes of weights and tile_m x kKBlock of tokens.
constexpr int64_t kKBlock = 4096;
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

// C tiles leave through an L1 staging buffer: a tile store straight into the output rows (1 KB
// apart, a few L1 sets) stalled on their misses; plain vector stores drain in the background.
// Two buffers: the C tiles of one micro call are converted (the epilogue) while the next call's
// tdpbssd run, a few rows per K step, so that the divider works beside the tile unit.
struct alignas(64) Staged {
  int32_t c[4][kTm * G];  // C tile 2i + j: token tile i, group j
};

// The epilogue of one micro call's staged C tiles, run a few rows at a time.
struct Epilogue {
  const Staged* st = nullptr;  // null: nothing pending
  int32_t* out;                // out element of (first token, first column of group 0)
  int64_t ld;
  __mmask16 mask[2];
  const float* a;  // the fused epilogue: a of the first token (null: int32 sums out)
  float s_w;
  bool stream;  // whole aligned lines of a large float output go out with streaming stores
  int tiles[4];  // the staged tiles, in order
  int rows = 0;  // 16 per staged tile
  int done = 0;

  // Row r of the pending rows: y = (float(sum) / a) * s_w (or the int32 sums) for one token and
  // one group's 16 columns.
  void row(int r) const {
    const int tile = tiles[r / kTm], t = r % kTm, i = tile >> 1, j = tile & 1;
    const int32_t* c = st->c[tile] + t * G;
    int32_t* dst = out + (i * kTm + t) * ld + j * G;
    if (!BITNET_AMX_RUN(epilogue)) return;
    if (a == nullptr) {
      Zmm::maskstore32(dst, mask[j], Zmm::load(c));
      return;
    }
    const Zmm::F y = simd::scale_sums<Zmm>(Zmm::load(c), a[i * kTm + t], s_w);
    if (stream && Zmm::all_lanes(mask[j]) && (reinterpret_cast<uintptr_t>(dst) & 63) == 0)
      Zmm::stream_ps(reinterpret_cast<float*>(dst), y);
    else
      Zmm::maskstore_ps(reinterpret_cast<float*>(dst), mask[j], y);
  }
  // The next `count` pending rows (fewer at the end).
  void some(int count) {
    const int end = std::min(rows, done + count);
    for (; done < end; ++done) row(done);
  }
  void finish() { some(rows); }
};

// What one micro call multiplies: 1 or 2 token tiles (A) by 1 or 2 groups (B) over the whole K.
struct Block {
  const int8_t* q;     // A tiles of the token pair, packed by pack_tokens: [k step][32 tokens][64]
  // B tile of group j at K step s: b[j] + (s & b_wrap) * b_stride (a decoded slot: [k step][16
  // quads][64], or a ring of a few steps decoded just ahead; b[1] unused for one group).
  const int8_t* b[2];
  int64_t b_stride;
  int64_t b_wrap;
  int64_t k;           // columns of the K block
  // Not the first K block: C starts from these int32 partial sums (out element of the first token and
  // column, row stride ld, lanes per group); null: from zero.
  const int32_t* partial;
  int64_t ld;
  __mmask16 mask[2];
  // Where this call's C goes (row stride ld), prefetched for writing during the call when the
  // epilogue will store it with plain stores: consecutive calls write 32 rows each, N floats apart,
  // which the hardware prefetchers do not fetch ahead. Null: not prefetched.
  int32_t* dst;
};

// C tile (i, j) from the partial sums of an earlier K block, through an L1 staging tile.
inline void load_partial(int tile, const Block& blk, int i, int j, int32_t* staging) {
  for (int t = 0; t < kTm; ++t)
    _mm512_store_si512(staging + t * G, _mm512_maskz_loadu_epi32(blk.mask[j], blk.partial + (i * kTm + t) * blk.ld + j * G));
  switch (tile) {  // tile numbers are immediates
    case 0: _tile_loadd(0, staging, 64); break;
    case 1: _tile_loadd(1, staging, 64); break;
    case 2: _tile_loadd(2, staging, 64); break;
    default: _tile_loadd(3, staging, 64); break;
  }
}

// Weight decode run beside a micro call's tdpbssd, one K step per step: either the next group pair
// into its slot (ahead 0), or, when a group pair meets a single token pair, the call's own B tiles
// `ahead` steps before their use into a small L1 ring (its tiles are read once: a whole decoded
// pair would only leave L1 between its decode and its use).
struct Decode {
  const uint8_t* grp[2] = {nullptr, nullptr};  // packed groups at the K block's start (null: none)
  int8_t* buf[2] = {nullptr, nullptr};         // decoded step s goes to buf[j] + (s & wrap) * stride
  int64_t stride = kKStep * G;
  int64_t wrap = -1;
  int64_t ahead = 0;

  void step(int64_t s) const {
    for (int j = 0; j < 2; ++j)
      if (grp[j] && BITNET_AMX_RUN(decode)) unpack_group(grp[j], s * kKStep, kKStep, buf[j] + (s & wrap) * stride);
  }
};
// The just-in-time ring: kRingSteps K steps of two groups' B tiles, decoded kAhead steps early.
constexpr int64_t kRingSteps = 4, kAhead = 2;

// MB token tiles (1 or 2) x NG groups (1 or 2) over the whole K, C kept in tiles throughout:
// tiles 0-3 C, 4-5 A, 6-7 B. Each K step also converts a few rows of the previous call's C (`prev`)
// and decodes 64 columns of weights (`decode`); the C tiles then go to `st`.
template <int MB, int NG>
void micro(const Block& blk, Epilogue& prev, const Decode& decode, Staged& st) {
  if (blk.partial) {  // st is free: the previous call's C was staged in the other buffer
    load_partial(0, blk, 0, 0, st.c[0]);
    if (NG > 1) load_partial(1, blk, 0, 1, st.c[1]);
    if (MB > 1) load_partial(2, blk, 1, 0, st.c[2]);
    if (MB > 1 && NG > 1) load_partial(3, blk, 1, 1, st.c[3]);
  } else {
    _tile_zero(0);
    if (NG > 1) _tile_zero(1);
    if (MB > 1) _tile_zero(2);
    if (MB > 1 && NG > 1) _tile_zero(3);
  }
  const int64_t steps = blk.k / kKStep;
  const int per_step = static_cast<int>((prev.rows + steps - 1) / steps);
  BITNET_AMX_COUNT(tdp, steps * MB * NG);
  const int64_t lines = MB * kTm * NG, lines_per_step = (lines + steps - 1) / steps;  // of blk.dst
  for (int64_t s = 0; s < std::min(decode.ahead, steps); ++s) decode.step(s);
  for (int64_t s = 0; s < steps; ++s) {
    if (BITNET_AMX_RUN(tiles)) {
      const int8_t* a = blk.q + s * 2 * kTm * kKStep;
      const int64_t b_off = (s & blk.b_wrap) * blk.b_stride;
      _tile_loadd(4, a, 64);
      _tile_loadd(6, blk.b[0] + b_off, 64);  // kKStep columns = 16 quads x 64 bytes
      _tile_dpbssd(0, 4, 6);
      if (NG > 1) {
        _tile_loadd(7, blk.b[1] + b_off, 64);
        _tile_dpbssd(1, 4, 7);
      }
      if (MB > 1) {
        _tile_loadd(5, a + kTm * 64, 64);
        _tile_dpbssd(2, 5, 6);
        if (NG > 1) _tile_dpbssd(3, 5, 7);
      }
    }
    prev.some(per_step);
    if (s + decode.ahead < steps) decode.step(s + decode.ahead);
    if (blk.dst)
      for (int64_t l = s * lines_per_step; l < std::min(lines, (s + 1) * lines_per_step); ++l)
        __builtin_prefetch(blk.dst + (l / NG) * blk.ld + (l % NG) * G, 1, 3);
  }
  prev.finish();
  _tile_stored(0, st.c[0], 64);
  if (NG > 1) _tile_stored(1, st.c[1], 64);
  if (MB > 1) _tile_stored(2, st.c[2], 64);
  if (MB > 1 && NG > 1) _tile_stored(3, st.c[3], 64);
}

// Activation rows [rows x kc] (stride ldq) -> contiguous A tiles [kc / 64][32][64] (rows 16-31
// unused for one token tile): each tile load then reads 1 KB in sequence instead of 16 lines at a
// K-byte stride (few L1 sets).
void pack_tokens(const int8_t* q, int64_t ldq, int64_t rows, int64_t kc, int8_t* apack) {
  for (int64_t kk = 0; kk < kc; kk += kKStep)
    for (int64_t r = 0; r < rows; ++r)
      _mm512_store_si512(apack + (kk / kKStep) * 2 * kTm * 64 + r * 64, _mm512_loadu_si512(q + r * ldq + kk));
}

// Per-thread scratch (grown once, 64-byte aligned); `which` names one of the kernel's buffers.
int8_t* scratch(int which, size_t bytes) {
  thread_local std::vector<int8_t> storage[2];
  std::vector<int8_t>& s = storage[which];
  if (s.size() < bytes + 64) s.resize(bytes + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(s.data());
  return reinterpret_cast<int8_t*>((p + 63) & ~uintptr_t{63});
}
constexpr int kTokenScratch = 0, kWeightScratch = 1;

struct Scale {  // fused epilogue: per-token a and the weight scale
  const float* a;
  float s_w;
};

// What every K block of one call shares.
struct Call {
  const uint8_t* packed;
  int64_t k;
  int64_t gstride;  // bytes per packed group
  int64_t g0, g1;   // groups of [n0, n1)
  int64_t n0, n1;
  int64_t m0;       // first token
  int64_t pairs;    // token pairs (the last may be one tile)
  int64_t tokens;   // tokens in whole tiles
  int32_t* out;
  int64_t ld;
  const Scale* sc;
  bool stream;
};

// C of token pair p and groups (g, g + ng - 1) goes out through `pending`: converted beside the next
// micro call (or by the caller after the last).
void stage_pair(const Call& c, int64_t p, int64_t g, int ng, int mb, bool last_block, Staged& st, Epilogue& pending) {
  const int64_t i = c.m0 + 2 * kTm * p;
  pending = Epilogue{};
  pending.st = &st;
  pending.out = c.out + (i - c.m0) * c.ld + (g * G - c.n0);
  pending.ld = c.ld;
  for (int j = 0; j < 2; ++j) pending.mask[j] = j < ng ? Zmm::lane_mask(g + j, c.n0, c.n1) : 0;
  pending.a = c.sc && last_block ? c.sc->a + i : nullptr;  // earlier K blocks: int32 partial sums
  pending.s_w = c.sc ? c.sc->s_w : 0.0f;
  pending.stream = c.stream && last_block && (c.ld & 15) == 0;
  int staged = 0;
  for (int ti = 0; ti < mb; ++ti)
    for (int j = 0; j < ng; ++j) pending.tiles[staged++] = 2 * ti + j;
  pending.rows = staged * static_cast<int>(kTm);
}

// One K block [k0, k0 + kc) of the call: group pairs outer, token pairs inner. With two or more
// token pairs, a group pair is decoded once into one of two weight slots (2 groups x 16 rows x kc
// int8 each) and swept over every token pair's A tiles (apack, packed once per block), the next
// pair being decoded beside the first token pair's tdpbssd. With one token pair, each B tile is
// used once: it is decoded just ahead of its use into an L1 ring (wbuf's first 8 KB) instead.
void run_block(const Call& c, int64_t k0, int64_t kc, const int8_t* apack, int8_t* wbuf, Staged* st,
               int& staged_calls, Epilogue& pending) {
  const bool first = k0 == 0, last = k0 + kc == c.k;
  const bool ring = c.pairs == 1;
  const int64_t slot_bytes = 2 * G * kc;
  if (!ring)
    for (int64_t g = c.g0; g < std::min(c.g0 + 2, c.g1); ++g) {
      if (BITNET_AMX_RUN(decode)) unpack_group(c.packed + g * c.gstride, k0, kc, wbuf + (g - c.g0) * G * kc);
      BITNET_AMX_COUNT(decoded_bytes, G * kc);
    }
  const Decode no_decode{};
  for (int64_t g = c.g0; g < c.g1; g += 2) {
    const int ng = g + 1 < c.g1 ? 2 : 1;
    const int64_t pair_index = (g - c.g0) / 2;
    Block blk;
    blk.k = kc;
    blk.ld = c.ld;
    for (int j = 0; j < 2; ++j) blk.mask[j] = j < ng ? Zmm::lane_mask(g + j, c.n0, c.n1) : 0;
    Decode decode;
    if (ring) {  // this pair's own tiles, kAhead steps early, into a ring of kRingSteps steps
      for (int j = 0; j < 2; ++j) blk.b[j] = wbuf + j * kKStep * G;
      blk.b_stride = 2 * kKStep * G;
      blk.b_wrap = kRingSteps - 1;
      for (int j = 0; j < ng; ++j) {
        decode.grp[j] = c.packed + (g + j) * c.gstride + (k0 / kSpan) * 64;
        decode.buf[j] = wbuf + j * kKStep * G;
        BITNET_AMX_COUNT(decoded_bytes, G * kc);
      }
      decode.stride = blk.b_stride;
      decode.wrap = blk.b_wrap;
      decode.ahead = kAhead;
    } else {  // the pair's slot was decoded before; the next pair goes to the other slot
      blk.b[0] = wbuf + pair_index % 2 * slot_bytes;
      blk.b[1] = blk.b[0] + G * kc;
      blk.b_stride = kKStep * G;
      blk.b_wrap = -1;
      for (int j = 0; j < 2 && g + 2 + j < c.g1; ++j) {
        decode.grp[j] = c.packed + (g + 2 + j) * c.gstride + (k0 / kSpan) * 64;
        decode.buf[j] = wbuf + (pair_index + 1) % 2 * slot_bytes + j * G * kc;
        BITNET_AMX_COUNT(decoded_bytes, G * kc);
      }
    }
    for (int64_t p = 0; p < c.pairs; ++p) {
      const int64_t i = c.m0 + 2 * kTm * p;
      const int mb = i + 2 * kTm <= c.m0 + c.tokens ? 2 : 1;
      blk.q = apack + p * 2 * kTm * kc;
      blk.partial = first ? nullptr : c.out + (i - c.m0) * c.ld + (g * G - c.n0);
      blk.dst = c.stream && last ? nullptr : c.out + (i - c.m0) * c.ld + (g * G - c.n0);
      Staged& dst = st[staged_calls++ % 2];
      const Decode& beside = p == 0 ? decode : no_decode;
      if (mb == 2)
        ng == 2 ? micro<2, 2>(blk, pending, beside, dst) : micro<2, 1>(blk, pending, beside, dst);
      else
        ng == 2 ? micro<1, 2>(blk, pending, beside, dst) : micro<1, 1>(blk, pending, beside, dst);
      stage_pair(c, p, g, ng, mb, last, dst, pending);
    }
  }
  pending.finish();  // the next K block reads these partial sums
}

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
  Call c;
  c.packed = packed;
  c.k = k;
  c.gstride = group_stride(k, G);
  c.g0 = n0 / G;
  c.g1 = panel_groups(n1, G);
  c.n0 = n0;
  c.n1 = n1;
  c.m0 = m0;
  c.tokens = tiled_m;
  c.pairs = (tiled_m + 2 * kTm - 1) / (2 * kTm);
  c.out = out;
  c.ld = ld;
  c.sc = sc;
  c.stream = sc && rows.m * n * 4 >= kStreamBytes;
  const int64_t kc_max = std::min(k, kKBlock);
  int8_t* apack = scratch(kTokenScratch, static_cast<size_t>(c.pairs * 2 * kTm * kc_max));
  // 2 slots x 2 groups (>= the ring's kRingSteps x 2 groups x 1 KB: kc_max >= 128)
  int8_t* wbuf = scratch(kWeightScratch, static_cast<size_t>(4 * G * kc_max));

  Staged st[2];
  Epilogue pending{};
  int staged_calls = 0;
  for (int64_t k0 = 0; k0 < k; k0 += kKBlock) {
    const int64_t kc = std::min(kKBlock, k - k0);
    for (int64_t p = 0; p < c.pairs; ++p) {
      const int64_t i = m0 + 2 * kTm * p;
      if (BITNET_AMX_RUN(pack))
        pack_tokens(rows.q + i * k + k0, k, std::min<int64_t>(2 * kTm, m0 + tiled_m - i), kc, apack + p * 2 * kTm * kc);
    }
    load_amx_tile_config();
    run_block(c, k0, kc, apack, wbuf, st, staged_calls, pending);
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
const I2SKernel kAmx = {"amx", packed_bytes, repack, quantize<Zmm>, dot, /*tile_m=*/512, /*tile_n=*/512, dot_scaled,
                        /*min_tile_n=*/0, panel_layout(G)};

}  // namespace

const I2SKernel* amx_kernel() { return &kAmx; }

}  // namespace bitnet_onnx::i2s::mul
