#include "driver.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "measured_choice.h"
#include "simd/vector_math.h"
#include "thread_clock.h"

namespace bitnet_onnx::i2s {
namespace {

// Rows per quantization job: split across threads only when there is enough work.
constexpr int64_t kQuantRowsPerJob = 64;
// The dot's (token tile x output tile) jobs: when the kernel's own tiles give fewer than kMinJobs,
// output tiles are halved (down to the kernel's min_tile_n, in multiples of kTileNAlign so that
// tile edges fall on whole 16- and 32-row panels and on cache lines of y) so that the pool can
// balance them across threads (e.g. Gemma3's k/v projections, N = 256, are one 256x256 tile).
constexpr int64_t kMinJobs = 8;
constexpr int64_t kTileNAlign = 32;

int64_t tiles(int64_t size, int64_t tile) { return (size + tile - 1) / tile; }

// Everything one call's jobs read; jobs write disjoint parts of y (and of q, a, qsum).
struct Job {
  const I2SKernel* kernel;
  const uint8_t* packed;
  int64_t m, n, k;
  QuantizedRows rows;
  int64_t tile_m, tile_n;  // job grid (tile_n may be finer than the kernel's)
  int64_t tiles_m, tiles_n;
  float s_w;
  float* y;
  // quantization
  QuantizeFn quantize;  // the ISA's, whichever family runs (family.h)
  const float* x;
  const float* norm;
  float eps;
  int8_t* q;
  float* a;
  int32_t* qsum;
  std::atomic<bool> failed{false};
  // a trial's clock (MatMul::run): whether a dot job ran on a thread other than the caller's
  std::thread::id caller;
  std::atomic<bool> left_caller{false};
};

void quantize_job(void* p, size_t i) {
  Job& job = *static_cast<Job*>(p);
  const int64_t r0 = static_cast<int64_t>(i) * kQuantRowsPerJob;
  const int64_t r1 = std::min(job.m, r0 + kQuantRowsPerJob);
  job.quantize(job.x + r0 * job.k, r1 - r0, job.k, job.norm, job.eps, job.q + r0 * job.k, job.a + r0, job.qsum + r0);
}

// Job index -> (n tile, m tile), n outer: consecutive jobs on one thread reuse a weight tile.
void dot_job(void* p, size_t i) {
  Job& job = *static_cast<Job*>(p);
  if (std::this_thread::get_id() != job.caller) job.left_caller.store(true, std::memory_order_relaxed);
  const I2SKernel& kern = *job.kernel;
  const int64_t ti = static_cast<int64_t>(i);
  const int64_t m0 = (ti % job.tiles_m) * job.tile_m, m1 = std::min(job.m, m0 + job.tile_m);
  const int64_t n0 = (ti / job.tiles_m) * job.tile_n, n1 = std::min(job.n, n0 + job.tile_n);
  if (kern.dot_scaled) {
    try {  // a kernel's per-thread scratch may fail to grow (lookup kernels): never throw into the pool
      kern.dot_scaled(job.packed, job.n, job.k, job.rows, job.s_w, m0, m1, n0, n1, job.y + m0 * job.n + n0, job.n);
    } catch (...) {
      job.failed = true;
    }
    return;
  }
  const int64_t ld = n1 - n0;
  // Per-thread scratch, reused across calls: no allocation or zeroing per job (matters at M = 1).
  thread_local std::vector<int32_t> sums;
  try {
    const size_t need = static_cast<size_t>((m1 - m0) * ld);
    if (sums.size() < need) sums.resize(need);
  } catch (...) {
    job.failed = true;
    return;
  }
  try {
    kern.dot(job.packed, job.n, job.k, job.rows, m0, m1, n0, n1, sums.data(), ld);
  } catch (...) {
    job.failed = true;
    return;
  }
  for (int64_t r = m0; r < m1; ++r) {
    const float a = job.a[r];
    float* yr = job.y + r * job.n + n0;
    const int32_t* sr = sums.data() + (r - m0) * ld;
    for (int64_t c = 0; c < ld; ++c) yr[c] = simd::scale_sum(sr[c], a, job.s_w);
  }
}

// `count` jobs on the pool, or inline when there is one (no pool round trip at M = 1).
void run_jobs(const ParallelFor& pool, void (*job)(void*, size_t), size_t count, Job& arg) {
  if (count > 1 && pool.run)
    pool.run(pool.pool, job, count, &arg);
  else
    for (size_t i = 0; i < count; ++i) job(&arg, i);
}

// Kernels that read the same packed bytes (I2SKernel::layout): a constant W is packed once for them.
bool same_layout(const I2SKernel& a, const I2SKernel& b) {
  return a.layout && b.layout && std::strcmp(a.layout, b.layout) == 0;
}

AlignedBytes pack(const I2SKernel& kernel, const uint8_t* i2s, int64_t n, int64_t k) {
  AlignedBytes packed(kernel.packed_bytes(n, k));
  if (n > 0) kernel.repack(i2s, n, k, packed.data());
  return packed;
}

}  // namespace

AlignedBytes::AlignedBytes(size_t n) : size(n) {
  if (n) {
    ptr.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64)));
    if (!ptr) throw std::bad_alloc();
  }
}

namespace {

int64_t padded(int64_t m, int64_t block) { return (m + block - 1) / block * block; }

// The first rule of `family` for `isa` that an [n, *] W meets (null: none; the family does not run
// unless forced).
const FamilyRule* rule_for(Family family, Isa isa, int64_t n) {
  const KernelFamily& f = family_of(family);
  for (size_t r = 0; r < f.rule_count; ++r)
    if (f.rules[r].isa == isa && n >= f.rules[r].min_n) return &f.rules[r];
  return nullptr;
}

// "measure, rules, mul or lut": the values BITNET_ONNX_KERNEL accepts.
std::string choice_values() {
  std::string out = std::string(kMeasureValue) + ", " + kRulesValue;
  for (Family f = 0; f < kFamilyCount; ++f) out += std::string(f + 1 == kFamilyCount ? " or " : ", ") + family_name(f);
  return out;
}

}  // namespace

bool candidates_for(Isa isa, const char* forced_family, Candidates* out, std::string* error) {
  Candidates c;
  for (Family f = 0; f < kFamilyCount; ++f) c.kernel[f] = family_kernel(f, isa);
  const std::string value = forced_family ? forced_family : "";
  if (value == kRulesValue) {
    c.choice = FamilyChoice::kRules;
  } else if (!value.empty() && value != kMeasureValue) {
    int found = -1;
    for (Family f = 0; f < kFamilyCount; ++f)
      if (value == family_name(f)) found = f;
    if (found < 0) {
      if (error) *error = "BITNET_ONNX_KERNEL=" + value + ": unknown kernel family; expected " + choice_values();
      return false;
    }
    if (!c.kernel[found]) {
      if (error)
        *error = "BITNET_ONNX_KERNEL=" + value + ": the " + isa_table()[isa].name + " ISA has no kernel of that family";
      return false;
    }
    c.choice = FamilyChoice::kForced;
    c.only = found;
  }
  *out = c;
  return true;
}

Family select_family(const Candidates& candidates, Isa isa, int64_t m, int64_t k, int64_t n) {
  (void)k;  // no rule depends on K (K = 640..3072 measured alike)
  if (candidates.choice == FamilyChoice::kForced) return candidates.only;
  // Costs in percent of the base family's time per token: the cheapest family runs, the earlier on a tie.
  Family best = kBaseFamily;
  int64_t best_cost = 100 * m;
  for (Family f = kBaseFamily + 1; f < kFamilyCount; ++f) {
    if (!candidates.kernel[f]) continue;
    const FamilyRule* rule = rule_for(f, isa, n);
    if (rule == nullptr) continue;
    const int64_t cost = padded(m, rule->block) * rule->cost_percent;
    if (cost < best_cost) best = f, best_cost = cost;
  }
  return best;
}

bool family_possible(const Candidates& candidates, Isa isa, Family family, int64_t k, int64_t n) {
  (void)k;
  if (!candidates.kernel[family]) return false;
  switch (candidates.choice) {
    case FamilyChoice::kMeasured:
      return true;
    case FamilyChoice::kForced:
      return family == candidates.only;
    case FamilyChoice::kRules:
      break;
  }
  return family == kBaseFamily || rule_for(family, isa, n) != nullptr;
}

MatMul::MatMul(Isa isa, const char* forced_family) : isa_(isa) {
  std::string error;
  if (!candidates_for(isa, forced_family, &candidates_, &error)) throw std::invalid_argument(error);
}

void MatMul::set_weights(const uint8_t* i2s, int64_t n, int64_t k) {
  for (Family f = 0; f < kFamilyCount; ++f) {
    packed_[f] = AlignedBytes();
    packed_in_[f] = f;
    if (!family_possible(candidates_, isa_, f, k, n)) continue;
    for (Family e = 0; e < f && packed_in_[f] == f; ++e)
      if (family_possible(candidates_, isa_, e, k, n) && same_layout(*candidates_.kernel[e], *candidates_.kernel[f]))
        packed_in_[f] = e;
    if (packed_in_[f] == f) packed_[f] = pack(*candidates_.kernel[f], i2s, n, k);
  }
  w_n_ = n;
  w_k_ = k;
  has_weights_ = true;
}

FamilyPick MatMul::family_for(int64_t m, int64_t k, int64_t n) const {
  if (candidates_.choice != FamilyChoice::kMeasured) return {select_family(candidates_, isa_, m, k, n), false};
  return measured_choice().pick(candidates_, isa_, m, k, n);
}

void MatMul::run(const Call& call, const ParallelFor& pool) const {
  const int64_t m = call.m, n = call.n, k = call.k;
  if (m == 0 || n == 0) return;
  const FamilyPick pick = family_for(m, k, n);
  const Family family = pick.family;
  const I2SKernel* kernel = candidates_.kernel[family];

  // A trial times the family's own part of the call: packing a runtime W and the dot (the
  // quantization is the same whichever family runs). Other calls read no clock. When every dot job
  // ran on the calling thread (a 1-thread session), the trial is the caller's CPU time: what the
  // family's work took, with whatever else the host ran meanwhile left out (another process's turn
  // on the core, a container's CPU quota running out); with jobs on other threads, the wall clock,
  // since the call lasts until its slowest thread is done.
  using Clock = std::chrono::steady_clock;
  const auto now = [&pick] { return pick.timed ? Clock::now() : Clock::time_point{}; };
  const auto cpu_now = [&pick] { return pick.timed ? thread_cpu_seconds() : 0.0; };
  Clock::duration family_time{};
  double family_cpu = 0;
  Clock::time_point started = now();
  double cpu_started = cpu_now();
  AlignedBytes w_rt;
  const uint8_t* packed = packed_[packed_in_[family]].data();
  if (call.w_i2s) {
    w_rt = pack(*kernel, call.w_i2s, n, k);
    packed = w_rt.data();
  }
  family_time += now() - started;
  family_cpu += cpu_now() - cpu_started;

  // Uninitialized (quantize writes every element).
  std::unique_ptr<int8_t[]> q(new int8_t[static_cast<size_t>(m * k)]);
  std::unique_ptr<float[]> a(new float[static_cast<size_t>(m)]);
  std::unique_ptr<int32_t[]> qsum(new int32_t[static_cast<size_t>(m)]);
  Job job;
  job.kernel = kernel;
  job.packed = packed;
  job.m = m;
  job.n = n;
  job.k = k;
  job.quantize = quantizer(isa_);
  job.x = call.x;
  job.norm = call.norm;
  job.eps = call.eps;
  job.q = q.get();
  job.a = a.get();
  job.qsum = qsum.get();
  job.rows = QuantizedRows{q.get(), a.get(), qsum.get(), m, k};
  job.tile_m = kernel->tile_m;
  job.tiles_m = tiles(m, job.tile_m);
  job.tile_n = kernel->tile_n;
  while (job.tiles_m * tiles(n, job.tile_n) < kMinJobs && kernel->min_tile_n > 0 && job.tile_n > kernel->min_tile_n)
    job.tile_n = std::max(kernel->min_tile_n, (job.tile_n / 2 + kTileNAlign - 1) / kTileNAlign * kTileNAlign);
  job.tiles_n = tiles(n, job.tile_n);
  job.s_w = call.s_w;
  job.y = call.y;
  job.caller = std::this_thread::get_id();

  run_jobs(pool, quantize_job, static_cast<size_t>(tiles(m, kQuantRowsPerJob)), job);
  started = now();
  cpu_started = cpu_now();
  run_jobs(pool, dot_job, static_cast<size_t>(job.tiles_m * job.tiles_n), job);
  family_time += now() - started;
  family_cpu += cpu_now() - cpu_started;
  if (job.failed) throw std::bad_alloc();  // a trial that fails is never recorded: its shape runs the base family
  if (pick.timed)
    measured_choice().record(candidates_, isa_, m, k, n, family,
                             job.left_caller ? std::chrono::duration<double>(family_time).count() : family_cpu);
}

}  // namespace bitnet_onnx::i2s
