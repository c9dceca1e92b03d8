// The tiling shared by every ISA: job -> (batch, kv head, query tile), the band's key range,
// packing (scaled queries, transposed key tiles), the mask on edge tiles and the final 1 / l.
// Compiled without ISA flags: the ISA files hold only their tile ops (no shared inline code
// built with wider instructions than this CPU may have).
#include <algorithm>
#include <cmath>
#include <limits>
#include <atomic>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "attention.h"
#include "phases.h"

namespace bitnet_onnx {
namespace attention {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Query rows per job (group * tile_q): with tile_q a divisor of kTileK, query tiles line up with
// key tiles, so a causal band's diagonal costs one tile; small enough for L2.
constexpr int64_t kTargetRows = 64;

// Per-thread buffers, reused across jobs and calls.
struct Scratch {
  std::vector<float> q, s, o, m, l, alpha;
  std::vector<uint16_t> q16, p16;  // Bf16TileOps operands
};

template <class T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// -inf on the scores a row may not see: outside its band, past the sequence's last key (nk),
// and (unless every key of the tile is real) at masked keys. Rows are ranges, so this vectorizes.
void mask_tile(const Problem& p, const int64_t* mask, int64_t q0, int64_t nq, int64_t rows, int64_t j0,
               int64_t nk, bool keys_real, float* s) {
  float key_bias[kTileK];
  if (!keys_real)
    for (int64_t jj = 0; jj < nk; ++jj) key_bias[jj] = mask[j0 + jj] != 0 ? 0.0f : kNegInf;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = q0 + r % nq;  // [lo, hi): the row's allowed columns of this tile
    const int64_t lo = p.before == kUnbounded ? 0 : std::clamp<int64_t>(i - p.before - j0, 0, nk);
    const int64_t hi = p.after == kUnbounded ? nk : std::clamp<int64_t>(i + p.after + 1 - j0, lo, nk);
    float* sr = s + r * kTileK;
    for (int64_t jj = 0; jj < lo; ++jj) sr[jj] = kNegInf;
    for (int64_t jj = hi; jj < kTileK; ++jj) sr[jj] = kNegInf;
    if (!keys_real)
      for (int64_t jj = lo; jj < hi; ++jj) sr[jj] += key_bias[jj];
  }
}

}  // namespace

namespace {

// make_plan: packed_bf16 lays K and V out for Bf16TileOps, with ops' packing where it has it.
Plan plan_call(const Problem& p, bool packed_bf16, const Bf16TileOps* ops) {
  Plan plan;
  plan.p = p;
  plan.packed_bf16 = packed_bf16 && p.precision == Precision::kBf16;
  plan.group = p.q_heads / p.kv_heads;
  plan.tile_q = std::max<int64_t>(8, kTargetRows / plan.group);
  plan.q_tiles = (p.seq + plan.tile_q - 1) / plan.tile_q;
  plan.jobs = p.batch * p.kv_heads * plan.q_tiles;
  const int64_t s = p.seq;
  plan.prefix.assign(static_cast<size_t>(p.batch * (s + 1)), 0);
  plan.first.assign(static_cast<size_t>(p.batch), s);
  plan.last.assign(static_cast<size_t>(p.batch), -1);
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t* pre = plan.prefix.data() + b * (s + 1);
    for (int64_t j = 0; j < s; ++j) {
      const bool real = p.mask[b * s + j] != 0;
      pre[j + 1] = pre[j] + real;
      if (real) {
        plan.first[b] = std::min(plan.first[b], j);
        plan.last[b] = j;
      }
    }
  }
  // Repack K (transposed) and V per (batch, kv head). ld_kt: room for one tile past S, and not a
  // multiple of 64 floats so the rows of a tile spread over the L1 sets.
  const int64_t d = p.head_dim, ld_kv = p.kv_heads * d;
  plan.ld_kt = (s + kTileK + 15) / 16 * 16;
  if (plan.ld_kt % 64 == 0) plan.ld_kt += 16;
  const bool bf16 = p.precision == Precision::kBf16;
  if (plan.packed_bf16) {
    // kt16: pairs of the head dimension per key; vh16: pairs of keys from first[b], zero past S.
    plan.ld_vh = (s + kTileK) / 2 + 1;
    plan.kt16.reset(new uint16_t[static_cast<size_t>(p.batch * p.kv_heads * d * plan.ld_kt)]);
    plan.vh16.reset(new uint16_t[static_cast<size_t>(p.batch * p.kv_heads * plan.ld_vh * d * 2)]);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.kv_heads; ++h) {
        uint16_t* kt = plan.kt16.get() + (b * p.kv_heads + h) * d * plan.ld_kt;
        uint16_t* vh = plan.vh16.get() + (b * p.kv_heads + h) * plan.ld_vh * d * 2;
        if (ops && ops->pack_k) {
          ops->pack_k(p.k + b * s * ld_kv + h * d, ld_kv, s, d, kt, plan.ld_kt);
        } else {
          for (int64_t j0 = 0; j0 < s; j0 += 16) {
            const int64_t j1 = std::min(s, j0 + 16);
            for (int64_t c = 0; c < d; ++c)
              for (int64_t j = j0; j < j1; ++j)
                kt[((c / 2) * plan.ld_kt + j) * 2 + c % 2] = bf16_bits(p.k[(b * s + j) * ld_kv + h * d + c]);
          }
        }
        for (int64_t c2 = 0; c2 < d / 2; ++c2)
          std::fill(kt + (c2 * plan.ld_kt + s) * 2, kt + (c2 + 1) * plan.ld_kt * 2, uint16_t{0});
        // Zeros from the pair holding key s - 1 on (an odd count leaves its second half zero); the pairs
        // before it are all written below.
        const int64_t first = std::min(plan.first[b], s);
        std::fill(vh + (s - first) / 2 * d * 2, vh + plan.ld_vh * d * 2, uint16_t{0});
        if (ops && ops->pack_v) {
          ops->pack_v(p.v + (b * s + first) * ld_kv + h * d, ld_kv, s - first, d, vh);
        } else {
          for (int64_t j = first; j < s; ++j) {
            const float* src = p.v + (b * s + j) * ld_kv + h * d;
            uint16_t* dst = vh + ((j - first) / 2) * d * 2 + (j - first) % 2;
            for (int64_t c = 0; c < d; ++c) dst[c * 2] = bf16_bits(src[c]);
          }
        }
      }
    return plan;
  }
  plan.kt.reset(new float[static_cast<size_t>(p.batch * p.kv_heads * d * plan.ld_kt)]);
  plan.vh.reset(new float[static_cast<size_t>(p.batch * p.kv_heads * s * d)]);
  // Precision::kBf16 on TileOps: the same layout, holding the bf16-rounded values.
  auto in = [bf16](float x) { return bf16 ? round_bf16(x) : x; };
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.kv_heads; ++h) {
      float* kt = plan.kt.get() + (b * p.kv_heads + h) * d * plan.ld_kt;
      float* vh = plan.vh.get() + (b * p.kv_heads + h) * s * d;
      for (int64_t j0 = 0; j0 < s; j0 += 16) {  // 16 keys at a time: reads and writes stay in cache
        const int64_t j1 = std::min(s, j0 + 16);
        for (int64_t c = 0; c < d; ++c)
          for (int64_t j = j0; j < j1; ++j) kt[c * plan.ld_kt + j] = in(p.k[(b * s + j) * ld_kv + h * d + c]);
      }
      for (int64_t c = 0; c < d; ++c) std::fill(kt + c * plan.ld_kt + s, kt + (c + 1) * plan.ld_kt, 0.0f);
      for (int64_t j = 0; j < s; ++j) {
        const float* src = p.v + (b * s + j) * ld_kv + h * d;
        if (bf16)
          for (int64_t c = 0; c < d; ++c) vh[j * d + c] = round_bf16(src[c]);
        else
          std::copy(src, src + d, vh + j * d);
      }
    }
  return plan;
}

}  // namespace

Plan make_plan(const Problem& p, bool packed_bf16) {
#if defined(__x86_64__) || defined(_M_X64)
  return plan_call(p, packed_bf16, packed_bf16 ? bf16_tile_ops(kIsaAmx) : nullptr);
#else
  return plan_call(p, packed_bf16, nullptr);
#endif
}

Plan make_plan(const Problem& p, const Bf16TileOps& ops) { return plan_call(p, true, &ops); }

namespace {

// The job of run_job for either tile-op kind: Ops is TileOps (float operands) or Bf16TileOps.
template <class Ops>
bool job(const Ops& ops, const Plan& plan, int64_t index) {
  constexpr bool kPacked = std::is_same_v<Ops, Bf16TileOps>;
  const Problem& p = plan.p;
  const int64_t g_n = plan.group, d = p.head_dim, s_len = p.seq;
  // Last query tiles first: under a causal band they have the most keys (better balance).
  const int64_t qt = plan.q_tiles - 1 - index % plan.q_tiles;
  const int64_t h = (index / plan.q_tiles) % p.kv_heads;
  const int64_t b = index / (plan.q_tiles * p.kv_heads);
  const int64_t q0 = qt * plan.tile_q, nq = std::min(plan.tile_q, s_len - q0), rows = g_n * nq;
  int64_t rows_padded = rows;  // whole row blocks of the tile ops (Bf16TileOps::row_multiple)
  if constexpr (std::is_same_v<Ops, Bf16TileOps>)
    rows_padded = (rows + ops.row_multiple - 1) / ops.row_multiple * ops.row_multiple;
  const int64_t ld_q = p.q_heads * d;
  const int64_t* pre = plan.prefix.data() + b * (s_len + 1);
  const int64_t* mask = p.mask + b * s_len;
  auto out_row = [&](int64_t r) { return p.out + (b * s_len + q0 + r % nq) * ld_q + (h * g_n + r / nq) * d; };

  // Keys any query of the tile may see: the band's span, cut to the real tokens.
  int64_t lo = p.before == kUnbounded ? 0 : std::max<int64_t>(0, q0 - p.before);
  int64_t hi = p.after == kUnbounded ? s_len - 1 : std::min(s_len - 1, q0 + nq - 1 + p.after);
  lo = std::max(lo, plan.first[b]);
  hi = std::min(hi, plan.last[b]);
  if (pre[q0 + nq] == pre[q0] || lo > hi) {  // no real query, or no key: zeros
    for (int64_t r = 0; r < rows; ++r) std::fill(out_row(r), out_row(r) + d, 0.0f);
    return true;
  }

  thread_local Scratch sc;
  try {
    grow(sc.q, rows * d);
    grow(sc.s, rows_padded * kTileK);
    grow(sc.o, rows_padded * d);
    grow(sc.m, rows);
    grow(sc.l, rows);
    grow(sc.alpha, rows);
    if constexpr (kPacked) {
      grow(sc.q16, rows_padded * d);
      grow(sc.p16, rows_padded * kTileK);
    }
  } catch (const std::bad_alloc&) {
    return false;
  }
  float *qp = sc.q.data(), *s = sc.s.data(), *o = sc.o.data();
  // Row r = (head g = r / nq, query q0 + r % nq); q scaled first, as the decomposed graph does,
  // then (kBf16) rounded.
  const bool bf16 = p.precision == Precision::kBf16;
  uint16_t* q16 = kPacked ? sc.q16.data() : nullptr;
  BITNET_ONNX_PHASE(kPhaseQuery, {
    bool packed_q = false;  // by the tile ops' own pack_q
    if constexpr (kPacked)
      if (ops.pack_q) {
        for (int64_t g = 0; g < g_n; ++g)
          ops.pack_q(p.q + (b * s_len + q0) * ld_q + (h * g_n + g) * d, ld_q, nq, d, p.scale, q16 + g * nq * d);
        packed_q = true;
      }
    for (int64_t r = 0; r < rows && !packed_q; ++r) {
      const float* src = p.q + (b * s_len + q0 + r % nq) * ld_q + (h * g_n + r / nq) * d;
      if constexpr (kPacked)
        for (int64_t c = 0; c < d; ++c) q16[r * d + c] = bf16_bits(src[c] * p.scale);
      else if (bf16)
        for (int64_t c = 0; c < d; ++c) qp[r * d + c] = round_bf16(src[c] * p.scale);
      else
        for (int64_t c = 0; c < d; ++c) qp[r * d + c] = src[c] * p.scale;
    }
    if constexpr (kPacked) {
      std::fill(q16 + rows * d, q16 + rows_padded * d, uint16_t{0});
      std::fill(sc.p16.begin() + rows * kTileK, sc.p16.begin() + rows_padded * kTileK, uint16_t{0});
    }
    std::fill(o, o + rows_padded * d, 0.0f);
    std::fill(sc.m.begin(), sc.m.begin() + rows, kNegInf);
    std::fill(sc.l.begin(), sc.l.begin() + rows, 0.0f);
  });

  // Key tiles on a grid anchored at the first real token: a row's sums then never depend on the
  // padding before it or on which rows share its job (tiles it may not see change nothing).
  const int64_t grid = plan.first[b];
  for (int64_t j0 = grid + (lo - grid) / kTileK * kTileK; j0 <= hi; j0 += kTileK) {
    const int64_t nk = std::min<int64_t>(kTileK, hi + 1 - j0);
    BITNET_ONNX_PHASE(kPhaseScores, {
      if constexpr (kPacked)
        ops.scores(q16, rows, d, plan.kt16.get() + (b * p.kv_heads + h) * d * plan.ld_kt + j0 * 2, plan.ld_kt, s);
      else
        ops.scores(qp, rows, d, plan.kt.get() + (b * p.kv_heads + h) * d * plan.ld_kt + j0, plan.ld_kt, s);
    });

    const bool keys_real = pre[j0 + nk] - pre[j0] == nk;
    const bool in_band = (p.before == kUnbounded || j0 >= q0 + nq - 1 - p.before) &&
                         (p.after == kUnbounded || j0 + nk - 1 <= q0 + p.after);
    if (!(keys_real && in_band && nk == kTileK))
      BITNET_ONNX_PHASE(kPhaseMask, mask_tile(p, mask, q0, nq, rows, j0, nk, keys_real, s));
    if constexpr (kPacked) {
      BITNET_ONNX_PHASE(kPhaseSoftmax, ops.softmax(s, rows, sc.m.data(), sc.l.data(), sc.alpha.data(), sc.p16.data()));
      const uint16_t* vh = plan.vh16.get() + ((b * p.kv_heads + h) * plan.ld_vh + (j0 - grid) / 2) * d * 2;
      BITNET_ONNX_PHASE(kPhasePv, ops.pv(sc.p16.data(), rows, nk, vh, d, sc.alpha.data(), o));
    } else {
      BITNET_ONNX_PHASE(kPhaseSoftmax, (bf16 ? ops.softmax_bf16 : ops.softmax)(s, rows, sc.m.data(), sc.l.data(),
                                                                                sc.alpha.data()));
      BITNET_ONNX_PHASE(kPhasePv, ops.pv(s, rows, nk, plan.vh.get() + ((b * p.kv_heads + h) * s_len + j0) * d, d, d,
                                         sc.alpha.data(), o));
    }
  }

  // Padded queries and queries with no allowed key give zeros.
  BITNET_ONNX_PHASE(kPhaseOutput, {
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = out_row(r);
      const float l = sc.l[r];
      if (mask[q0 + r % nq] == 0 || !(l > 0.0f)) {
        std::fill(dst, dst + d, 0.0f);
        continue;
      }
      const float* src = o + r * d;
      for (int64_t c = 0; c < d; ++c) dst[c] = src[c] / l;
    }
  });
  return true;
}

}  // namespace

bool run_job(const TileOps& ops, const Plan& plan, int64_t index) { return job(ops, plan, index); }
bool run_job(const Bf16TileOps& ops, const Plan& plan, int64_t index) { return job(ops, plan, index); }

std::string Path::name() const {
  if (bf16) return bf16->name;
  return std::string(ops->name) + (precision == Precision::kBf16 ? ":bf16" : "");
}

namespace {

// The path of a record at a precision: bf16 dot products where the record has them on this CPU, else
// the record's float tiles (on bf16-rounded operands under kBf16).
Path record_path(Isa isa, Precision precision) {
  Path path;
  path.precision = precision;
  path.bf16 = precision == Precision::kBf16 ? bf16_tile_ops(isa) : nullptr;
  path.ops = path.bf16 ? nullptr : tile_ops(isa);
  return path;
}

// Why `path` does not run head_dim: "head_dim 24 is not a multiple of 16, which avx512 needs".
std::string refusal(const Path& path, int64_t head_dim) {
  return "head_dim " + std::to_string(head_dim) + " is not a multiple of " + std::to_string(path.head_dim_multiple()) +
         ", which " + path.name() + " needs";
}

// What every job of one call shares; jobs write disjoint rows of the output.
struct CallJobs {
  const Path* path;
  const Plan* plan;
  std::atomic<bool> failed{false};
};

void call_job(void* arg, size_t i) {
  CallJobs& call = *static_cast<CallJobs*>(arg);
  const int64_t index = static_cast<int64_t>(i);
  const bool ok = call.path->bf16 ? run_job(*call.path->bf16, *call.plan, index)
                                  : run_job(*call.path->ops, *call.plan, index);
  if (!ok) call.failed = true;
}

}  // namespace

Attention::Attention() : own_(record_path(kIsaScalar, Precision::kF32)) {}

Attention::Attention(const char* forced_isa, Precision precision) : precision_(precision) {
  std::string error;
  const IsaRecord* record = select_isa(forced_isa, &error);
  if (record == nullptr) throw std::invalid_argument(error);
  isa_ = record->isa;
  own_ = record_path(isa_, precision);
  if (own_.ops == nullptr && own_.bf16 == nullptr)  // a record this build has always has a path (kPaths)
    throw std::invalid_argument(std::string("BITNET_ONNX_ISA=") + record->name + ": no attention path");
  if (forced_isa != nullptr && forced_isa[0] != '\0') forced_name_ = record->name;
}

// Down from the record's own path: bf16 dot products -> the record's float tiles -> the scalar tiles
// (every head dim), the precision kept.
PathChoice Attention::path_for(int64_t head_dim) const {
  PathChoice choice;
  choice.path = own_;
  if (head_dim % own_.head_dim_multiple() == 0) return choice;
  choice.fallback = refusal(own_, head_dim);
  if (own_.bf16) {
    choice.path.bf16 = nullptr;
    choice.path.ops = record_path(isa_, Precision::kF32).ops;
    if (head_dim % choice.path.head_dim_multiple() == 0) return choice;
  }
  choice.path.ops = scalar_tile_ops();
  choice.path.bf16 = nullptr;
  return choice;
}

void Attention::run(const Problem& problem, const ParallelFor& pool) const {
  if (problem.batch == 0 || problem.seq == 0) return;
  const PathChoice choice = path_for(problem.head_dim);
  if (!forced_name_.empty() && !choice.fallback.empty())
    throw std::invalid_argument("BITNET_ONNX_ISA=" + forced_name_ + ": " + choice.fallback +
                                "; a forced ISA does not fall back (to " + choice.path.name() + ")");
  Problem p = problem;
  p.precision = precision_;
  Plan plan;
  BITNET_ONNX_PHASE(kPhasePlan, plan = choice.path.bf16 ? make_plan(p, *choice.path.bf16) : make_plan(p));
  CallJobs call;
  call.path = &choice.path;
  call.plan = &plan;
  if (plan.jobs > 1 && pool.run)
    pool.run(pool.pool, call_job, static_cast<size_t>(plan.jobs), &call);
  else
    for (int64_t i = 0; i < plan.jobs; ++i) call_job(&call, static_cast<size_t>(i));
  if (call.failed) throw std::bad_alloc();
}

}  // namespace attention
}  // namespace bitnet_onnx
