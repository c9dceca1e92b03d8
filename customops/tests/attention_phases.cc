// attention_phases: where one EncoderAttention call's time goes, phase by phase (phases.h: the plan,
// queries, scores, mask, softmax, p . v, output), on a build of the attention kernels with the phase
// timers compiled in (attention_kernels_phases; the op library has none). One thread, random q/k/v, no
// padding, the layer shapes of benchmarks/bench_attention.py; per (shape, S) a Markdown row: the median
// total in this thread's CPU time (which a shared machine's preemption does not inflate) and each phase's
// share of it, in milliseconds and %, "other" the rest (job set-up, scratch, the pool loop). The phase
// timers are wall clock (a thread-CPU clock read costs far more than a key tile's phases), so a phase's
// share is its wall time summed over the repetitions over their summed wall time: time slices lost to
// other processes land in phases in proportion to their length, and the sums spread them so.
//
//   attention_phases [--isa amx] [--precision bf16] [--shapes qwen3,gemma3-sliding,gemma3-full]
//                    [--seq 512,2048,8192] [--reps 5]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "attention.h"
#include "phases.h"
#include "tool_support.h"

using tool_support::split;

using namespace bitnet_onnx::attention;

namespace {

struct Shape {
  const char* name;
  int64_t q_heads, kv_heads, head_dim, before, after;
};

// benchmarks/bench_attention.py's SHAPES: Qwen3-0.6B (causal), Gemma3-270M's sliding and full layers.
const Shape kShapes[] = {
    {"qwen3", 16, 8, 128, kUnbounded, 0},
    {"gemma3-sliding", 4, 1, 256, 256, 256},
    {"gemma3-full", 4, 1, 256, kUnbounded, kUnbounded},
};

struct Timing {
  double total_ms = 0;  // CPU time
  double wall_ms = 0;
  double phase_ms[kPhaseCount] = {};  // wall clock
};

double thread_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// One call of the driver with the phase counters zeroed first.
Timing time_call(const Attention& driver, const Problem& p) {
  std::fill(phase_ns, phase_ns + kPhaseCount, 0);
  const double start = thread_cpu_ms();
  const int64_t wall_start = phase_clock();
  driver.run(p, ParallelFor{});
  Timing t;
  t.total_ms = thread_cpu_ms() - start;
  t.wall_ms = (phase_clock() - wall_start) * 1e-6;
  for (int i = 0; i < kPhaseCount; ++i) t.phase_ms[i] = phase_ns[i] * 1e-6;
  return t;
}

// The median CPU total, split by each phase's share of the repetitions' summed wall time.
Timing summary(std::vector<Timing> runs) {
  Timing m;
  double wall = 0, phase_wall[kPhaseCount] = {};
  for (const Timing& t : runs) {
    wall += t.wall_ms;
    for (int i = 0; i < kPhaseCount; ++i) phase_wall[i] += t.phase_ms[i];
  }
  std::sort(runs.begin(), runs.end(), [](const Timing& a, const Timing& b) { return a.total_ms < b.total_ms; });
  m.total_ms = runs[runs.size() / 2].total_ms;
  for (int i = 0; i < kPhaseCount; ++i) m.phase_ms[i] = wall > 0 ? m.total_ms * phase_wall[i] / wall : 0;
  return m;
}

void print_row(const Shape& shape, int64_t seq, const std::string& path, const Timing& t) {
  double timed = 0;
  std::printf("| %s | %lld | %s | %.2f |", shape.name, static_cast<long long>(seq), path.c_str(), t.total_ms);
  for (int i = 0; i < kPhaseCount; ++i) {
    timed += t.phase_ms[i];
    std::printf(" %.2f (%.0f%%) |", t.phase_ms[i], 100 * t.phase_ms[i] / t.total_ms);
  }
  const double other = t.total_ms - timed;
  std::printf(" %.2f (%.0f%%) |\n", other, 100 * other / t.total_ms);
}

}  // namespace

int main(int argc, char** argv) {
  const tool_support::Flags flags(argc, argv, {{"--isa", ""}, {"--precision", "bf16"},
                                               {"--shapes", "qwen3,gemma3-sliding,gemma3-full"},
                                               {"--seq", "512,2048,8192"}, {"--reps", "5"}});
  if (!flags.ok()) return 2;
  const std::string isa = flags.text("--isa"), precision = flags.text("--precision"), shapes = flags.text("--shapes"),
                    seqs = flags.text("--seq");
  const int reps = std::max(1, flags.integer("--reps"));
  if (precision != "f32" && precision != "bf16") return std::fprintf(stderr, "--precision f32 or bf16\n"), 2;
  const Attention driver(isa.empty() ? nullptr : isa.c_str(), precision == "bf16" ? Precision::kBf16 : Precision::kF32);
  std::printf("| shape | S | path | total ms |");
  for (const char* name : kPhaseNames) std::printf(" %s ms (%%) |", name);
  std::printf(" other ms (%%) |\n|---|---|---|---|");
  for (int i = 0; i <= kPhaseCount; ++i) std::printf("---|");
  std::printf("\n");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::string& shape_name : split(shapes)) {
    const Shape* shape = nullptr;
    for (const Shape& s : kShapes)
      if (shape_name == s.name) shape = &s;
    if (!shape) return std::fprintf(stderr, "unknown shape %s\n", shape_name.c_str()), 2;
    for (const std::string& seq_text : split(seqs)) {
      const int64_t seq = std::atoll(seq_text.c_str());
      std::vector<float> q(static_cast<size_t>(seq * shape->q_heads * shape->head_dim));
      std::vector<float> k(static_cast<size_t>(seq * shape->kv_heads * shape->head_dim)), v(k.size()), out(q.size());
      for (float& x : q) x = normal(rng);
      for (float& x : k) x = normal(rng);
      for (float& x : v) x = normal(rng);
      std::vector<int64_t> mask(static_cast<size_t>(seq), 1);
      Problem p;
      p.q = q.data();
      p.k = k.data();
      p.v = v.data();
      p.mask = mask.data();
      p.out = out.data();
      p.batch = 1;
      p.seq = seq;
      p.q_heads = shape->q_heads;
      p.kv_heads = shape->kv_heads;
      p.head_dim = shape->head_dim;
      p.scale = 1.0f / std::sqrt(static_cast<float>(shape->head_dim));
      p.before = shape->before;
      p.after = shape->after;
      time_call(driver, p);  // warm-up: scratch grown, pages touched
      std::vector<Timing> runs;
      for (int r = 0; r < reps; ++r) runs.push_back(time_call(driver, p));
      print_row(*shape, seq, driver.path_for(shape->head_dim).path.name(), summary(runs));
      std::fflush(stdout);
    }
  }
  return 0;
}
