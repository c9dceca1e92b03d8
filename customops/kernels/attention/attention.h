// Fused scaled-dot-product attention for encoders (the EncoderAttention op, docs/attention.md):
// flash-style tiles of queries x keys with an online softmax in float32, grouped-query heads
// sharing each K/V tile, key tiles wholly outside the causal / sliding band never visited.
// Pure C++ (no ORT headers); the caller splits jobs over its thread pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "isa.h"

namespace bitnet_onnx {
namespace attention {

constexpr int64_t kUnbounded = -1;  // a band side without a limit

// What q.k and p.v multiply (the op's `precision` attribute, docs/attention.md). kBf16: q (after
// scaling), k, the softmax's p and v are rounded to bfloat16 (round_bf16), their products summed in
// float32; the softmax (max, exp, l, alpha, 1 / l) stays float32. Every CPU rounds the same way, so
// hosts differ only by float32 summation order, as in kF32.
enum class Precision { kF32, kBf16 };

// float -> bfloat16 bits, the rounding of vcvtneps2bf16 (which the AVX512-BF16 path uses, so the
// scalar reference and every path round identically): round to nearest even, denormals to a signed
// zero (the instruction treats denormal inputs as zero), NaN stays a (quiet) NaN.
// Branch-free (selects), so the driver's packing loops vectorize.
inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet = (u | 0x00400000u) >> 16;
  const uint32_t zero = (u >> 16) & 0x8000u;
  uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;
  r = (u & 0x7f800000u) == 0 ? zero : r;
  return static_cast<uint16_t>(r);
}
inline float bf16_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
// x rounded to the nearest bfloat16, as a float (products of two such values are exact in float32).
inline float round_bf16(float x) { return bf16_to_float(bf16_bits(x)); }

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
  Precision precision = Precision::kF32;
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
  // Precision::kBf16 on operands already rounded to bf16 (held as floats): softmax, then each p
  // rounded (round_bf16) before it is summed into l and written to s. With scores and pv this is
  // the bf16 path of a CPU without bf16 dot products (scalar: the bf16 reference).
  void (*softmax_bf16)(float* s, int64_t rows, float* m, float* l, float* alpha);
};

// Precision::kBf16 with bf16 dot products (vdpbf16ps): operands stored as bf16 bits, in pairs
// along the summed axis (what one 32-bit lane of vdpbf16ps multiplies).
struct Bf16TileOps {
  const char* name;
  int64_t head_dim_multiple;  // head_dim % this == 0, else the caller uses the TileOps path
  // s[r][j] = sum_d q[r][d] * k[j][d]: q [rows][d] (row stride d), kt in pairs of d:
  // kt[(c / 2) * ldk * 2 + j * 2 + c % 2] = k[j][c].
  void (*scores)(const uint16_t* q, int64_t rows, int64_t d, const uint16_t* kt, int64_t ldk, float* s);
  // TileOps::softmax_bf16, writing the rounded p as bf16 to p [rows][kTileK] instead of to s (s is then scratch).
  void (*softmax)(float* s, int64_t rows, float* m, float* l, float* alpha, uint16_t* p);
  // o[r][:] = o[r][:] * alpha[r] + sum_{j < nk} p[r][j] * v[j][:], v in pairs of keys:
  // v[(j / 2) * d * 2 + c * 2 + j % 2] = v[j][c] (nk rounded up to even keys are read; p is 0 past nk).
  void (*pv)(const uint16_t* p, int64_t rows, int64_t nk, const uint16_t* v, int64_t d, const float* alpha,
             float* o);
  // > 1 (AMX tiles): q, s, p and o hold whole blocks of this many rows (rows rounded up; the extra
  // rows of q and p are zeros, of o zeros on return), and pv reads kTileK keys of p and v always.
  int64_t row_multiple;
  // Packing in the ISA's own instructions (null: the driver's generic loops; the same bits either way).
  // kt[((c / 2) * ldk + j) * 2 + c % 2] = bf16_bits(k[j * ld + c]) for j < n, c < d.
  void (*pack_k)(const float* k, int64_t ld, int64_t n, int64_t d, uint16_t* kt, int64_t ldk);
  // vh[(j / 2) * d * 2 + c * 2 + j % 2] = bf16_bits(v[j * ld + c]) for j < n, c < d (an odd n leaves the
  // last pair's second half as it was).
  void (*pack_v)(const float* v, int64_t ld, int64_t n, int64_t d, uint16_t* vh);
  // q16[r * d + c] = bf16_bits(q[r * ld + c] * scale) for r < n, c < d.
  void (*pack_q)(const float* q, int64_t ld, int64_t n, int64_t d, float scale, uint16_t* q16);
};

const TileOps* scalar_tile_ops();
#if defined(__x86_64__) || defined(_M_X64)
const TileOps* avx2_tile_ops();
const TileOps* avx512_tile_ops();
const Bf16TileOps* avx512bf16_tile_ops();  // needs AVX512-BF16 (CpuFeatures::avx512bf16)
const Bf16TileOps* amxbf16_tile_ops();     // needs AMX-BF16 (CpuFeatures::amxbf16)
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
  // Bf16TileOps layouts instead (packed_bf16): kt16 [B, Hkv, D/2, ld_kt, 2]; vh16 [B, Hkv, ld_vh, D, 2]
  // with key pairs counted from the batch row's first real token (key tiles start there), zero past S.
  bool packed_bf16 = false;
  int64_t ld_vh = 0;  // key pairs per (batch, kv head): S/2 + 1 and a tile's worth (AMX reads whole tiles)
  std::unique_ptr<uint16_t[]> kt16, vh16;
};

// The tile ops one call runs: TileOps on float operands (rounded to bf16 first under kBf16), or
// Bf16TileOps (bf16 dot products; then `ops` is null).
struct Path {
  const TileOps* ops = nullptr;
  const Bf16TileOps* bf16 = nullptr;
  Precision precision = Precision::kF32;
  // attention_kernel_test's --paths names: "avx512", "avx512:bf16" (bf16 on the float tiles), "amxbf16".
  std::string name() const;
  int64_t head_dim_multiple() const { return bf16 ? bf16->head_dim_multiple : ops->head_dim_multiple; }
};

// What a node runs for one head dim: the path of its ISA record at its precision, or the path it fell
// back to because that one does not take the head dim, and why.
struct PathChoice {
  Path path;
  std::string fallback;  // empty: the record's own path; else why it did not run
};

// The host's thread pool: runs job(arg, i) for every i < count, on any threads, and returns when all
// are done (ORT's KernelContext::ParallelFor, or a plain loop when run is null). i2s::ParallelFor's shape.
struct ParallelFor {
  void* pool = nullptr;
  void (*run)(void* pool, void (*job)(void* arg, size_t i), size_t count, void* arg) = nullptr;
};

// THE attention driver of one node (the ORT glue, customops/ort/encoder_attention_op.cc, validates
// inputs and calls run with its pool): the ISA record and the precision are fixed when the node is
// created; each call picks its path by head dim (path_for), plans and runs the jobs.
class Attention {
 public:
  // The scalar f32 path (a node's state before its init); assign a real one before use.
  Attention();
  // forced_isa: BITNET_ONNX_ISA's value (null or empty: the best record this CPU runs). Throws
  // std::invalid_argument with select_isa's message when it names a record this CPU does not run.
  Attention(const char* forced_isa, Precision precision);

  // The path run() takes for head_dim: the record's own (amxbf16 under amx at bf16 where the CPU has
  // AMX-BF16, avx512 at f32, ...), else the next one down that takes head_dim, with the reason.
  PathChoice path_for(int64_t head_dim) const;

  // Attention of p (validated: shapes, q_heads % kv_heads == 0, head_dim > 0; p.precision is ignored,
  // the node's own is used) with jobs on `pool`. Throws std::invalid_argument naming BITNET_ONNX_ISA when
  // the ISA was forced and its path does not take p.head_dim (a forced ISA never falls back: its
  // figures would be another path's), std::bad_alloc when memory runs out.
  void run(const Problem& p, const ParallelFor& pool) const;

  Precision precision() const { return precision_; }

 private:
  Isa isa_ = kIsaScalar;
  Path own_;                  // the record's path at this precision
  std::string forced_name_;   // the BITNET_ONNX_ISA value, empty when not forced
  Precision precision_ = Precision::kF32;
};

// Validated by the caller (shapes, q_heads % kv_heads == 0, head_dim > 0). Throws std::bad_alloc.
// packed_bf16 (only with p.precision == kBf16): lay K and V out for Bf16TileOps (with the packing of this
// CPU's bf16 tile ops, bf16_tile_ops(kIsaAmx), where it has any); otherwise K and V are floats (rounded
// to bf16 under kBf16) for TileOps.
Plan make_plan(const Problem& p, bool packed_bf16 = false);
// Laid out for Bf16TileOps (p.precision == kBf16) with ops' packing (its pack_k and pack_v; null: generic loops).
Plan make_plan(const Problem& p, const Bf16TileOps& ops);

// Runs job `index` (< plan.jobs): writes the output rows of one (batch, kv head, query tile)
// for all query heads of the group. False only when its scratch could not be allocated.
// Jobs write disjoint outputs and each is deterministic: any thread split gives the same bits.
bool run_job(const TileOps& ops, const Plan& plan, int64_t index);
// The same for a plan made with packed_bf16.
bool run_job(const Bf16TileOps& ops, const Plan& plan, int64_t index);

// The tile ops this CPU runs best, or the ones BITNET_ONNX_ISA's value names (a record of the ISA
// table, isa.h: scalar; avx2 and avxvnni -> avx2; avx512vnni and amx -> avx512; i8mm, dotprod, neon -> scalar).
// nullptr with *error set (select_isa's message) when the named ISA is unknown or missing on this CPU.
const TileOps* select_tile_ops(const char* forced, std::string* error);

// The attention path of `isa` (dispatch.cc's row); null when this build does not have the ISA.
const TileOps* tile_ops(Isa isa);

// The bf16 dot-product tile ops of `isa` on this CPU: AMX-BF16 where `isa` is amx and this CPU has
// AMX-BF16; else AVX512-BF16 where it is avx512vnni or amx and the CPU has AVX512-BF16; null otherwise
// (the caller then runs that ISA's TileOps on bf16-rounded operands).
const Bf16TileOps* bf16_tile_ops(Isa isa);

// The variable that forces what precision = "auto" resolves to (f32 or bf16; unset or empty: the rule
// below). Explicit "f32" and "bf16" attributes do not read it.
inline constexpr const char* kPrecisionEnv = "BITNET_ONNX_ATTENTION_PRECISION";

// What precision = "auto" runs on this host with BITNET_ONNX_ISA = forced_isa: kBf16 where the bf16 path
// (bf16_tile_ops) of the ISA select_tile_ops(forced_isa) picks is measured faster than the f32 tiles on this CPU class
// (AMX-BF16; AVX512-BF16 on AMD Zen 4: dispatch.cc), kF32 elsewhere;
// forced_precision (kPrecisionEnv's value) names the answer instead. False with *error set (naming the
// variable) when forced_precision is not "f32" or "bf16", or select_tile_ops refuses forced_isa.
bool auto_precision(const char* forced_isa, const char* forced_precision, Precision* precision, std::string* error);

// The rule auto_precision applies to a record this CPU runs, without kPrecisionEnv: kBf16 where its bf16 path on
// this CPU (bf16_tile_ops) is measured faster than the f32 tiles, kF32 elsewhere.
Precision auto_precision_of(Isa isa);

// "f32" or "bf16": the attribute value of `precision`.
const char* precision_name(Precision precision);

}  // namespace attention
}  // namespace bitnet_onnx
