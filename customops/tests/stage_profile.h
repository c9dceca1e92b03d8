// What the kernels' stage profilers share (amx_profile.cc, panel_profile.cc): one op call on one thread, as the
// op makes it, and its timing whole and with stages left out. A profiler compiles a kernel's own source with
// that kernel's stage switches bound to a global struct of flags (Stages: a bool per stage, true = runs) and
// names its stages here; everything else is this file's.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "i2s_bench_support.h"
#include "tool_support.h"

namespace stage_profile {

using bitnet_onnx::i2s::I2SKernel;
using bitnet_onnx::i2s::QuantizedRows;

// One projection's call: its packed weight and, for the current M, its buffers (outputs and int8 rows 64-byte
// aligned, as ONNX Runtime allocates tensors).
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  std::vector<uint8_t> packed;
  std::vector<float> x, a;
  i2s_bench::AlignedVector<float> y;
  i2s_bench::AlignedVector<int8_t> q;
  std::vector<int32_t> qsum;

  // Buffers for m tokens, x drawn from a standard normal.
  void set_tokens(int64_t tokens, std::mt19937& rng) {
    m = tokens;
    x.resize(static_cast<size_t>(m * k));
    std::normal_distribution<float> normal;
    for (auto& v : x) v = normal(rng);
    q.resize(static_cast<size_t>(m * k));
    a.resize(static_cast<size_t>(m));
    qsum.resize(static_cast<size_t>(m));
    y.resize(static_cast<size_t>(m * n));
  }
};

// The command line every profiler takes: --shapes KxN,... --m M,... --reps R --min-seconds S.
struct Options {
  std::vector<std::string> shapes, ms;
  int reps = 7;
  double min_seconds = 0.05;
};

// Options from argv; false (unknown flags named on stderr) when they do not parse.
inline bool parse_options(int argc, char** argv, Options* o) {
  const tool_support::Flags flags(argc, argv, {{"--shapes", "1024x2048"}, {"--m", "16,128,512,2048"}, {"--reps", "7"},
                                               {"--min-seconds", "0.05"}});
  if (!flags.ok()) return false;
  o->shapes = tool_support::split(flags.text("--shapes"));
  o->ms = tool_support::split(flags.text("--m"));
  o->reps = std::max(1, flags.integer("--reps"));
  o->min_seconds = flags.real("--min-seconds");
  return true;
}

// The Problem of one --shapes item for `kern`: random codes (also left in *codes), packed for it; false (the
// item named on stderr) for a bad item.
inline bool set_shape(const I2SKernel& kern, const std::string& shape, std::mt19937& rng, Problem* p,
                      std::vector<uint8_t>* codes) {
  if (!i2s_bench::parse_shape(shape, &p->k, &p->n)) return false;
  *codes = i2s_bench::random_codes(p->n, p->k, rng);
  p->packed.resize(kern.packed_bytes(p->n, p->k));
  kern.repack(codes->data(), p->n, p->k, p->packed.data());
  return true;
}

// The driver's job grid on one thread (driver.cc: tiles of the kernel's tile_m x tile_n).
inline int64_t jobs_of(const I2SKernel& kern, int64_t m, int64_t n) {
  return (m + kern.tile_m - 1) / kern.tile_m * ((n + kern.tile_n - 1) / kern.tile_n);
}

// One op call on one thread: quantize (when asked), then the multiply over the driver's grid.
inline void call(const I2SKernel& kern, Problem& p, bool quantize) {
  if (quantize) kern.quantize(p.x.data(), p.m, p.k, nullptr, 1e-6f, p.q.data(), p.a.data(), p.qsum.data());
  i2s_bench::dot_grid(kern, p.packed.data(), p.n, p.k, QuantizedRows{p.q.data(), p.a.data(), p.qsum.data(), p.m, p.k},
                      p.y.data());
}

// A way to make the call: its name in the output, the stages that run, and whether quantize does.
template <class Stages>
struct Variant {
  std::string name;
  Stages stages;
  bool quantize;
};

// The call whole ("full"), without quantize, without each of `stages` (name, its flag) in turn ("-<name>"),
// and with all of them and quantize left out ("loops").
template <class Stages>
std::vector<Variant<Stages>> variants(const std::vector<std::pair<const char*, bool Stages::*>>& stages) {
  std::vector<Variant<Stages>> all{{"full", Stages{}, true}, {"-quantize", Stages{}, false}};
  Stages none;
  for (const auto& [name, flag] : stages) {
    Stages without;
    without.*flag = false;
    none.*flag = false;
    all.push_back({std::string("-") + name, without, true});
  }
  all.push_back({"loops", none, false});
  return all;
}

// Calls per timed sample: enough for min_seconds, from one probe call's seconds.
inline int64_t calls_per_sample(double min_seconds, double probe_seconds) {
  return std::max<int64_t>(1, static_cast<int64_t>(min_seconds / std::max(probe_seconds, 1e-7)));
}

// Prints " <name>=<median microseconds per call>" for each of `all`: `reps` repetitions of `calls` calls per
// variant, the variants interleaved within each repetition so that drift hits all alike (CPU time of the thread).
// `switches` is the global the kernel's stage switches read; it is left with every stage on.
template <class Stages>
void print_medians(const I2SKernel& kern, Problem& p, const std::vector<Variant<Stages>>& all, size_t count,
                   Stages& switches, int reps, int64_t calls) {
  std::vector<std::vector<double>> times(count);
  for (int r = 0; r < reps; ++r)
    for (size_t v = 0; v < count; ++v) {
      switches = all[v].stages;
      call(kern, p, all[v].quantize);
      const double t0 = tool_support::thread_cpu_seconds();
      for (int64_t i = 0; i < calls; ++i) call(kern, p, all[v].quantize);
      times[v].push_back((tool_support::thread_cpu_seconds() - t0) / static_cast<double>(calls));
    }
  switches = Stages{};
  for (size_t v = 0; v < count; ++v) {
    std::sort(times[v].begin(), times[v].end());
    std::printf(" %s=%.2f", all[v].name.c_str(), times[v][times[v].size() / 2] * 1e6);
  }
}

}  // namespace stage_profile
