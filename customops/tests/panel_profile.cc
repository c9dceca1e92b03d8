// Where a multiply SIMD kernel's time goes (issue 40): the kernel of one ISA (avx512vnni, avxvnni, avx2: the
// buffered path of i2s_panel/x86_dot.h), called as the op calls it on one thread, timed whole and with one
// stage left out at a time. One program per ISA, each compiled with that ISA's flags only
// (customops/tests/CMakeLists.txt): it includes the kernel's own file (PANEL_KERNEL_FILE, e.g.
// i2s/mul/avx2.cc, whose accessor the build renames to panel_profiled_kernel) with the panel's stage
// switches (BITNET_PANEL_RUN) and counters (BITNET_PANEL_COUNT) bound to the globals below; the library's
// copy has every stage compiled in. A stage's cost is the time it adds to the call (full time minus the time
// without it). Built and run by benchmarks/panel_profile.py.
//
//   panel_profile_avx2 --shapes 1024x2048,640x256 --m 16,128,512,2048 [--reps 7] [--min-seconds 0.05]
//
// Prints one line per (K, N, M): median microseconds of the whole call (quantize + every job of the driver's
// grid) and of the call without each stage, the step instructions per call (vpdpbusd, or vpmaddubsw +
// vpaddw) and the multiply-adds they make (padding rows included), the bytes of codes unpacked per call over
// the panel's codes as bytes, the job count, and
// "direct" where the call took the few-token path, which has no separate stages (its unpack is in registers).
// Before timing, the profiled kernel's output is checked bit for bit against the library's kernel of the
// same name: the switches must not change what the kernel computes. Exit 3 where this CPU does not run the
// ISA.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// The stages the profile can leave out, and what the kernel counts.
struct PanelStages {
  bool unpack = true;  // 2-bit codes of a panel and K block -> the L1 buffer of code bytes (unpack_block)
  bool steps = true;   // the microkernel's loads, broadcasts and step instructions over the buffer
  bool widen = true;   // int16 chunk sums -> int32 (vpmaddwd against ones + vpaddd; nothing with vpdpbusd)
  bool emit = true;    // sums -> (float(sum - qsum) / a) * s_w into y, or int32 partial sums between K blocks
};
struct PanelCounters {
  int64_t steps = 0;           // step instructions (Ops::step calls)
  int64_t unpacked_bytes = 0;  // code bytes written by unpack_block
};
namespace {
PanelStages g_stages;
PanelCounters g_counts;
}  // namespace
#define BITNET_PANEL_RUN(stage) (g_stages.stage)
#define BITNET_PANEL_COUNT(counter, n) (g_counts.counter += (n))
#define PANEL_QUOTE(file) #file
#define PANEL_SOURCE(file) PANEL_QUOTE(file)
#include PANEL_SOURCE(PANEL_KERNEL_FILE)
#include "families.h"
#include "i2s_bench_support.h"
#include "tool_support.h"

namespace {

using bitnet_onnx::i2s::I2SKernel;
using bitnet_onnx::i2s::QuantizedRows;
using tool_support::split;
using tool_support::thread_cpu_seconds;

struct Problem {
  int64_t m, n, k;
  std::vector<uint8_t> packed;
  std::vector<float> x, a;
  i2s_bench::AlignedVector<float> y;  // 64-byte aligned, as ORT allocates tensors
  i2s_bench::AlignedVector<int8_t> q;
  std::vector<int32_t> qsum;
};

// The driver's job grid on one thread (driver.cc: tiles of the kernel's tile_m x tile_n).
int64_t jobs_of(const I2SKernel& kern, int64_t m, int64_t n) {
  return (m + kern.tile_m - 1) / kern.tile_m * ((n + kern.tile_n - 1) / kern.tile_n);
}

// One op call on one thread: quantize (when asked), then the multiply over the driver's grid.
void call(const I2SKernel& kern, Problem& p, bool quantize) {
  if (quantize) kern.quantize(p.x.data(), p.m, p.k, nullptr, 1e-6f, p.q.data(), p.a.data(), p.qsum.data());
  i2s_bench::dot_grid(kern, p.packed.data(), p.n, p.k, QuantizedRows{p.q.data(), p.a.data(), p.qsum.data(), p.m, p.k},
                      p.y.data());
}

// Variants of a call: everything, then without one stage each, then nothing but the loops.
struct Variant {
  const char* name;
  PanelStages stages;
  bool quantize;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"full", PanelStages{}, true});
  v.push_back({"-quantize", PanelStages{}, false});
  PanelStages s;
  s.unpack = false;
  v.push_back({"-unpack", s, true});
  s = PanelStages{};
  s.steps = false;
  v.push_back({"-steps", s, true});
  s = PanelStages{};
  s.widen = false;
  v.push_back({"-widen", s, true});
  s = PanelStages{};
  s.emit = false;
  v.push_back({"-emit", s, true});
  v.push_back({"loops", PanelStages{false, false, false, false}, false});
  return v;
}

// The library's kernel of the profiled one's name; null (and why, on stderr) where this CPU does not run it.
const I2SKernel* library_kernel(const I2SKernel& profiled) {
  std::string err;
  bitnet_onnx::Isa isa;
  bitnet_onnx::i2s::Family family;
  const I2SKernel* library = bitnet_onnx::i2s::kernel_named(profiled.name, &isa, &family, &err);
  if (!library) std::fprintf(stderr, "panel_profile: %s\n", err.c_str());
  return library;
}

// The profiled kernel's y against the library's kernel on the same problem, bit for bit.
bool same_as_library(const I2SKernel& profiled, const I2SKernel* library, const std::vector<uint8_t>& i2s, Problem& p) {
  Problem ref = p;
  ref.packed.assign(library->packed_bytes(p.n, p.k), 0);
  library->repack(i2s.data(), p.n, p.k, ref.packed.data());
  call(*library, ref, true);
  call(profiled, p, true);
  if (std::memcmp(ref.y.data(), p.y.data(), p.y.size() * sizeof(float)) == 0) return true;
  std::fprintf(stderr, "panel_profile: the profiled %s kernel differs from the library's at K=%" PRId64 " N=%" PRId64
               " M=%" PRId64 "\n", profiled.name, p.k, p.n, p.m);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const tool_support::Flags flags(argc, argv, {{"--shapes", "1024x2048"}, {"--m", "16,128,512,2048"}, {"--reps", "7"},
                                               {"--min-seconds", "0.05"}});
  if (!flags.ok()) return 2;
  const std::string shapes = flags.text("--shapes"), ms = flags.text("--m");
  const int reps = flags.integer("--reps");
  const double min_seconds = flags.real("--min-seconds");
  const I2SKernel& kern = *bitnet_onnx::i2s::mul::panel_profiled_kernel();
  const I2SKernel* library = library_kernel(kern);
  if (!library) return 3;
  // rows per panel group: the padded rows of a one-row weight
  std::printf("kernel %s rows_per_group=%zu\n", kern.name, kern.packed_bytes(1, 128) * 4 / 128);
  std::mt19937 rng(0);
  const std::vector<Variant> all = variants();
  for (const std::string& shape : split(shapes, ',')) {
    Problem p;
    if (!i2s_bench::parse_shape(shape, &p.k, &p.n)) return 2;
    const std::vector<uint8_t> i2s = i2s_bench::random_codes(p.n, p.k, rng);
    p.packed.resize(kern.packed_bytes(p.n, p.k));
    kern.repack(i2s.data(), p.n, p.k, p.packed.data());
    for (const std::string& mstr : split(ms, ',')) {
      p.m = std::atoll(mstr.c_str());
      if (p.m <= 0) {
        std::fprintf(stderr, "bad M %s (a positive token count)\n", mstr.c_str());
        return 2;
      }
      p.x.resize(static_cast<size_t>(p.m * p.k));
      std::normal_distribution<float> normal;
      for (auto& v : p.x) v = normal(rng);
      p.q.resize(static_cast<size_t>(p.m * p.k));
      p.a.resize(static_cast<size_t>(p.m));
      p.qsum.resize(static_cast<size_t>(p.m));
      p.y.resize(static_cast<size_t>(p.m * p.n));
      g_stages = PanelStages{};
      if (!same_as_library(kern, library, i2s, p)) return 1;
      g_counts = PanelCounters{};
      double t0 = thread_cpu_seconds();
      call(kern, p, true);
      const PanelCounters per_call = g_counts;
      const int64_t calls = std::max<int64_t>(1, static_cast<int64_t>(min_seconds / std::max(thread_cpu_seconds() - t0, 1e-7)));
      const bool direct = per_call.steps == 0;  // the few-token path: one variant, the whole call
      std::vector<std::vector<double>> times(direct ? 1 : all.size());
      for (int r = 0; r < reps; ++r)  // variants interleaved within each repetition
        for (size_t v = 0; v < times.size(); ++v) {
          g_stages = all[v].stages;
          call(kern, p, all[v].quantize);
          t0 = thread_cpu_seconds();
          for (int64_t i = 0; i < calls; ++i) call(kern, p, all[v].quantize);
          times[v].push_back((thread_cpu_seconds() - t0) / calls);
        }
      g_stages = PanelStages{};
      std::printf("K=%" PRId64 " N=%" PRId64 " M=%" PRId64, p.k, p.n, p.m);
      for (size_t v = 0; v < times.size(); ++v) {
        std::sort(times[v].begin(), times[v].end());
        std::printf(" %s=%.2f", all[v].name, times[v][times[v].size() / 2] * 1e6);
      }
      // the panel's codes, one byte each when unpacked: padded rows x K
      const int64_t codes = static_cast<int64_t>(kern.packed_bytes(p.n, p.k)) * 4;
      std::printf(" steps=%" PRId64 " macs=%" PRId64 " unpacked_over_codes=%.2f jobs=%" PRId64 "%s\n", per_call.steps,
                  p.m * codes, static_cast<double>(per_call.unpacked_bytes) / static_cast<double>(codes),
                  jobs_of(kern, p.m, p.n), direct ? " direct" : "");
      std::fflush(stdout);
    }
  }
  return 0;
}
