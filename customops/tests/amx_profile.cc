// Where the AMX path's time goes (issue 40): the amx kernel's call, as the op makes it on one thread,
// timed whole and with one stage left out at a time. This file includes the kernel's source
// (customops/kernels/i2s/mul/amx.cc) with its stage switches (BITNET_AMX_RUN) and counters
// (BITNET_AMX_COUNT) bound to the globals below; the library's copy has every stage compiled in.
// A stage's cost is the time it adds to the call (full time minus the time without it), so work
// that overlaps other work costs what it does in place. Built and run by benchmarks/amx_profile.py.
//
//   amx_profile --shapes 1024x2048,640x256 --m 16,128,512,2048 [--reps 7] [--min-seconds 0.05]
//
// Prints one line per (K, N, M): median microseconds of the whole call (quantize + every job of the
// driver's grid) and of the call without each stage, the tdpbssd count, the bytes of weights
// decoded per call over the panel's size, the job count, and the register peak of tdpbssd measured
// here (4 independent tiles, no loads).
#include <sys/syscall.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <algorithm>
#include <random>
#include <string>
#include <vector>

// The stages the profile can leave out, and what the kernel counts.
struct AmxStages {
  bool decode = true;    // 2-bit weight codes -> int8 B tiles (unpack_group)
  bool pack = true;      // q rows -> contiguous A tiles (pack_tokens)
  bool tiles = true;     // the tile loads and tdpbssd over K
  bool epilogue = true;  // C (staged int32) -> (float(sum) / a) * s_w into y
};
struct AmxCounters {
  int64_t decoded_bytes = 0;  // int8 B bytes written by the decode
  int64_t tdp = 0;            // tdpbssd instructions
};
namespace {
AmxStages g_stages;
AmxCounters g_counts;
}  // namespace
#define BITNET_AMX_RUN(stage) (g_stages.stage)
#define BITNET_AMX_COUNT(counter, n) (g_counts.counter += (n))
// The included kernel's record accessor would collide with the library's.
#define amx_kernel amx_kernel_profiled
#include "amx.cc"
#undef amx_kernel
#include "cpu_features.h"
#include "i2s_bench_support.h"
#include "tool_support.h"

namespace {

using bitnet_onnx::i2s::I2SKernel;
using bitnet_onnx::i2s::QuantizedRows;
using tool_support::split;
using tool_support::thread_cpu_seconds;

// GOP/s of tdpbssd on four independent accumulator tiles, operands in registers.
double tdp_peak_gops() {
  bitnet_onnx::load_amx_tile_config();
  alignas(64) static int8_t zeros[1024];
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const int64_t iters = 2000000;
    const double t0 = thread_cpu_seconds();
    for (int64_t i = 0; i < iters; ++i) {
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    }
    const double t = thread_cpu_seconds() - t0;
    best = std::max(best, 4.0 * iters * 2.0 * 16 * 16 * 64 / t / 1e9);
  }
  _tile_release();
  return best;
}

struct Problem {
  int64_t m, n, k;
  std::vector<uint8_t> packed;
  std::vector<float> x, a, y;
  std::vector<int8_t> q;
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
  AmxStages stages;
  bool quantize;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"full", AmxStages{}, true});
  v.push_back({"-quantize", AmxStages{}, false});
  AmxStages s;
  s.decode = false;
  v.push_back({"-decode", s, true});
  s = AmxStages{};
  s.pack = false;
  v.push_back({"-pack", s, true});
  s = AmxStages{};
  s.tiles = false;
  v.push_back({"-tiles", s, true});
  s = AmxStages{};
  s.epilogue = false;
  v.push_back({"-epilogue", s, true});
  s = AmxStages{false, false, false, false};
  v.push_back({"loops", s, false});
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const tool_support::Flags flags(argc, argv, {{"--shapes", "1024x2048"}, {"--m", "16,128,512,2048"}, {"--reps", "7"},
                                               {"--min-seconds", "0.05"}});
  if (!flags.ok()) return 2;
  const std::string shapes = flags.text("--shapes"), ms = flags.text("--m");
  const int reps = flags.integer("--reps");
  const double min_seconds = flags.real("--min-seconds");
  if (!bitnet_onnx::cpu_features().amx) {
    std::fprintf(stderr, "amx_profile: this CPU (or OS) does not run AMX-INT8\n");
    return 3;
  }
  const I2SKernel& kern = *bitnet_onnx::i2s::mul::amx_kernel_profiled();
  std::printf("peak tdpbssd %.0f GOP/s\n", tdp_peak_gops());
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
      p.x.resize(static_cast<size_t>(p.m * p.k));
      std::normal_distribution<float> normal;
      for (auto& v : p.x) v = normal(rng);
      p.q.resize(static_cast<size_t>(p.m * p.k));
      p.a.resize(static_cast<size_t>(p.m));
      p.qsum.resize(static_cast<size_t>(p.m));
      p.y.resize(static_cast<size_t>(p.m * p.n));
      g_stages = AmxStages{};
      g_counts = AmxCounters{};
      double t0 = thread_cpu_seconds();
      call(kern, p, true);  // also fills q and a for the variants that skip quantize
      const AmxCounters per_call = g_counts;
      const int64_t calls = std::max<int64_t>(1, static_cast<int64_t>(min_seconds / std::max(thread_cpu_seconds() - t0, 1e-7)));
      std::vector<std::vector<double>> times(all.size());
      for (int r = 0; r < reps; ++r)  // variants interleaved within each repetition
        for (size_t v = 0; v < all.size(); ++v) {
          g_stages = all[v].stages;
          call(kern, p, all[v].quantize);
          t0 = thread_cpu_seconds();
          for (int64_t i = 0; i < calls; ++i) call(kern, p, all[v].quantize);
          times[v].push_back((thread_cpu_seconds() - t0) / calls);
        }
      g_stages = AmxStages{};
      std::printf("K=%" PRId64 " N=%" PRId64 " M=%" PRId64, p.k, p.n, p.m);
      for (size_t v = 0; v < all.size(); ++v) {
        std::sort(times[v].begin(), times[v].end());
        std::printf(" %s=%.2f", all[v].name, times[v][times[v].size() / 2] * 1e6);
      }
      const int64_t panel = (p.n + 15) / 16 * 16 * p.k;  // int8 bytes of the whole decoded W
      std::printf(" tdp=%" PRId64 " decoded_over_panel=%.2f jobs=%" PRId64 "\n", per_call.tdp,
                  static_cast<double>(per_call.decoded_bytes) / static_cast<double>(panel), jobs_of(kern, p.m, p.n));
      std::fflush(stdout);
    }
  }
  return 0;
}
