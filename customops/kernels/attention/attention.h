// Fused scaled-dot-product attention for encoders (the EncoderAttention op, docs/attention.md):
// flash-style tiles of queries x keys with an online softmax in float32, grouped-query heads
// sharing each K/V tile, key tiles wholly outside the causal / sliding band never visited.
// Pure C++ (no ORT headers); the caller splits jobs over its thread pool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "isa.h"

namespace bitnet_onnx {
namespace attention {

constexpr int64_t kUnbounded = -1;  // a band side without a limit

// One call's tensors and shape. Layouts are the projections' own: q [B, S, Hq*D],
// k and v [B, S, Hkv*D], out [B, S, Hq*D]; query head n reads kv head n / (Hq / Hkv).
struct Problem {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const int64_t* mask = nullptr;  // [B, S]: nonzero = a real token
  float* out = nullptr;
  int64_t batch = 0, seq = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;  // multiplies q before q.k
  // Key j serves query i iff mask[j] != 0 and i - before <= j <= i + after (kUnbounded: no limit).
  int64_t before = kUnbounded, after = kUnbounded;
};

// The tile operations one ISA provides (scalar.cc, avx2.cc, avx512.cc). Tiles are kTileK keys wide.
constexpr int kTileK = 64;
struct TileOps {
  const char* name;
  int64_t head_dim_multiple;  // the SIMD path needs head_dim % this == 0 (else the caller uses scalar)
  // s[r][j] = sum_d q[r][d] * kt[d][j] for r < rows, j < kTileK (row strides: q d, kt ldk, s kTileK).
  void (*scores)(const float* q, int64_t rows, int64_t d, const float* kt, int64_t ldk, float* s);
  // Online softmax step over each row of s (masked entries are -inf): m, l updated, s becomes
  // exp(s - m_new), alpha[r] = exp(m_old - m_new) (1 for a row with nothing allowed yet).
  void (*softmax)(float* s, int64_t rows, float* m, float* l, float* alpha);
  // o[r][:] = o[r][:] * alpha[r] + sum_{j < nk} p[r][j] * v[j][:] (v row stride ldv, o row stride d).
  void (*pv)(const float* p, int64_t rows, int64_t nk, const float* v, int64_t ldv, int64_t d,
             const float* alpha, float* o);
};

const TileOps* scalar_tile_ops();
#if defined(__x86_64__) || defined(_M_X64)
const TileOps* avx2_tile_ops();
const TileOps* avx512_tile_ops();
#endif

// What every job of one call shares: the problem, its tiling and the mask's summaries.
struct Plan {
  Problem p;
  int64_t group = 1;   // query heads per kv head
  int64_t tile_q = 1;  // queries per job (rows per job = group * tile_q)
  int64_t q_tiles = 0;
  int64_t jobs = 0;                  // batch * kv_heads * q_tiles
  std::vector<int64_t> prefix;       // [B, S+1]: real tokens among positions < j
  std::vector<int64_t> first, last;  // per batch: first and last real position (first > last: none)
  // K and V repacked once per call: kt [B, Hkv, D, ld_kt] (keys along rows, zero tail so a tile may
  // read past S) and vh [B, Hkv, S, D]. Tiles then read short, unit-stride rows; the inputs' own
  // row stride (Hkv*D floats, often 4 KiB) would put a whole tile in one L1 set.
  int64_t ld_kt = 0;
  std::unique_ptr<float[]> kt, vh;  // uninitialized but for kt's tail: no memset of a fresh buffer
};

// Validated by the caller (shapes, q_heads % kv_heads == 0, head_dim > 0). Throws std::bad_alloc.
Plan make_plan(const Problem& p);

// Runs job `index` (< plan.jobs): writes the output rows of one (batch, kv head, query tile)
// for all query heads of the group. False only when its scratch could not be allocated.
// Jobs write disjoint outputs and each is deterministic: any thread split gives the same bits.
bool run_job(const TileOps& ops, const Plan& plan, int64_t index);

// The tile ops this CPU runs best, or the ones BITNET_ONNX_ISA's value names (a record of the ISA
// table, isa.h: scalar; avx2 and avxvnni -> avx2; avx512vnni and amx -> avx512; i8mm, dotprod, neon -> scalar).
// nullptr with *error set (select_isa's message) when the named ISA is unknown or missing on this CPU.
const TileOps* select_tile_ops(const char* forced, std::string* error);

// The attention path of `isa` (dispatch.cc's row); null when this build does not have the ISA.
const TileOps* tile_ops(Isa isa);

}  // namespace attention
}  // namespace bitnet_onnx
