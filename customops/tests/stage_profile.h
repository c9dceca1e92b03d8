// What the kernels' stage profilers share (amx_profile.cc, panel_profile.cc, mixed_profile.cc): one op call on
// one thread, as the op makes it, and its timing whole and with stages left out. A profiler compiles a kernel's
// own source with that kernel's stage switches bound to a global struct of flags (Stages: a bool per stage, true
// = runs) and names its stages here; everything else is this file's.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "families.h"
#include "i2s_bench_support.h"
#include "tool_support.h"

namespace stage_profile {

using bitnet_onnx::i2s::I2SKernel;
using bitnet_onnx::i2s::QuantizedRows;
using bitnet_onnx::i2s::QuantizeFn;

// One projection's call: its packed weight and, for the current M, its buffers (outputs and int8 rows 64-byte
// aligned, as ONNX Runtime allocates tensors).
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  std::vector<uint8_t> packed;
  std::vector<float> x, a;
  i2s_bench::AlignedVector<float> y;
  i2s_bench::AlignedVector<int8_t> q;
  std::vector<int32_t> qsum;
  QuantizeFn quantize = nullptr;  // the activations' quantizer the driver uses with this kernel; null: the kernel's own

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
  const QuantizeFn quantizer = p.quantize ? p.quantize : kern.quantize;
  if (quantize) quantizer(p.x.data(), p.m, p.k, nullptr, 1e-6f, p.q.data(), p.a.data(), p.qsum.data());
  i2s_bench::dot_grid(kern, p.packed.data(), p.n, p.k, QuantizedRows{p.q.data(), p.a.data(), p.qsum.data(), p.m, p.k},
                      p.y.data());
}

// A way to make the call: its name in the output, the stages that run, whether quantize does, and the kernel
// that runs (null: the profiled one; else another instantiation of its source that reads the same packed bytes,
// e.g. mixed_profile's other splits).
template <class Stages>
struct Variant {
  std::string name;
  Stages stages;
  bool quantize;
  const I2SKernel* kernel = nullptr;
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
      const I2SKernel& runs = all[v].kernel ? *all[v].kernel : kern;
      call(runs, p, all[v].quantize);
      const double t0 = tool_support::thread_cpu_seconds();
      for (int64_t i = 0; i < calls; ++i) call(runs, p, all[v].quantize);
      times[v].push_back((tool_support::thread_cpu_seconds() - t0) / static_cast<double>(calls));
    }
  switches = Stages{};
  for (size_t v = 0; v < count; ++v) {
    std::sort(times[v].begin(), times[v].end());
    std::printf(" %s=%.2f", all[v].name.c_str(), times[v][times[v].size() / 2] * 1e6);
  }
}

// The library's kernel of the profiled one's name, and the activations' quantizer the driver uses with it; null
// (and why, on stderr) where this CPU does not run it.
inline const I2SKernel* library_kernel(const char* tool, const I2SKernel& profiled, QuantizeFn* quantize) {
  std::string err;
  bitnet_onnx::Isa isa;
  bitnet_onnx::i2s::Family family;
  const I2SKernel* library = bitnet_onnx::i2s::kernel_named(profiled.name, &isa, &family, &err);
  if (!library) {
    std::fprintf(stderr, "%s: %s\n", tool, err.c_str());
    return nullptr;
  }
  *quantize = library->quantize ? library->quantize : bitnet_onnx::i2s::quantizer(isa);
  return library;
}

// The profiled kernel's y against the library's kernel on the same problem, bit for bit.
inline bool same_as_library(const char* tool, const I2SKernel& profiled, const I2SKernel& library,
                            const std::vector<uint8_t>& codes, Problem& p) {
  Problem ref = p;
  ref.packed.assign(library.packed_bytes(p.n, p.k), 0);
  library.repack(codes.data(), p.n, p.k, ref.packed.data());
  call(library, ref, true);
  call(profiled, p, true);
  if (std::memcmp(ref.y.data(), p.y.data(), p.y.size() * sizeof(float)) == 0) return true;
  std::fprintf(stderr, "%s: the profiled %s kernel differs from the library's at K=%" PRId64 " N=%" PRId64
               " M=%" PRId64 "\n", tool, profiled.name, p.k, p.n, p.m);
  return false;
}

// A profiler's whole run over its command line: for every --shapes item at every --m, the kernel (and every
// variant's own kernel) checked against the library's (its stage switches must not change what it computes), one
// call counted, then its time whole and without each stage of `all` (print_medians) and `describe(problem,
// counters of one call, &whole_only)`: the counters as text; whole_only set where the call has no separate stages
// (only "full" is timed). First it prints `header(the library's kernel of that name)`. Returns the exit code: 0,
// 1 (the kernel differs from the library's), 2 (a bad argument), 3 (this CPU does not run the kernel).
template <class Stages, class Counters, class Header, class Describe>
int profile(const char* tool, int argc, char** argv, const I2SKernel& kern, Header header,
            const std::vector<Variant<Stages>>& all, Stages& switches, Counters& counters, Describe describe) {
  Options opt;
  if (!parse_options(argc, argv, &opt)) return 2;
  QuantizeFn quantize = nullptr;
  const I2SKernel* library = library_kernel(tool, kern, &quantize);
  if (!library) return 3;
  std::printf("%s\n", header(*library).c_str());
  std::mt19937 rng(0);
  for (const std::string& shape : opt.shapes) {
    Problem p;
    p.quantize = quantize;
    std::vector<uint8_t> codes;
    if (!set_shape(kern, shape, rng, &p, &codes)) return 2;
    for (const std::string& mstr : opt.ms) {
      const int64_t m = std::atoll(mstr.c_str());
      if (m <= 0) {
        std::fprintf(stderr, "%s: bad M %s (a positive token count)\n", tool, mstr.c_str());
        return 2;
      }
      p.set_tokens(m, rng);
      switches = Stages{};
      if (!same_as_library(tool, kern, *library, codes, p)) return 1;
      for (const Variant<Stages>& v : all)
        if (v.kernel && !same_as_library(tool, *v.kernel, *library, codes, p)) return 1;
      counters = Counters{};
      const double t0 = tool_support::thread_cpu_seconds();
      call(kern, p, true);
      const Counters per_call = counters;
      const int64_t calls = calls_per_sample(opt.min_seconds, tool_support::thread_cpu_seconds() - t0);
      bool whole_only = false;
      const std::string described = describe(p, per_call, &whole_only);
      std::printf("K=%" PRId64 " N=%" PRId64 " M=%" PRId64, p.k, p.n, p.m);
      print_medians(kern, p, all, whole_only ? 1 : all.size(), switches, opt.reps, calls);
      std::printf(" %s\n", described.c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace stage_profile
