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
#include "stage_profile.h"

namespace {

using bitnet_onnx::i2s::I2SKernel;
using stage_profile::Problem;
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

}  // namespace

int main(int argc, char** argv) {
  stage_profile::Options opt;
  if (!stage_profile::parse_options(argc, argv, &opt)) return 2;
  if (!bitnet_onnx::cpu_features().amx) {
    std::fprintf(stderr, "amx_profile: this CPU (or OS) does not run AMX-INT8\n");
    return 3;
  }
  const I2SKernel& kern = *bitnet_onnx::i2s::mul::amx_kernel_profiled();
  std::printf("peak tdpbssd %.0f GOP/s\n", tdp_peak_gops());
  std::mt19937 rng(0);
  const auto all = stage_profile::variants<AmxStages>({{"decode", &AmxStages::decode}, {"pack", &AmxStages::pack},
                                                       {"tiles", &AmxStages::tiles}, {"epilogue", &AmxStages::epilogue}});
  for (const std::string& shape : opt.shapes) {
    Problem p;
    std::vector<uint8_t> i2s;
    if (!stage_profile::set_shape(kern, shape, rng, &p, &i2s)) return 2;
    for (const std::string& mstr : opt.ms) {
      p.set_tokens(std::atoll(mstr.c_str()), rng);
      g_stages = AmxStages{};
      g_counts = AmxCounters{};
      const double t0 = thread_cpu_seconds();
      stage_profile::call(kern, p, true);  // also fills q and a for the variants that skip quantize
      const AmxCounters per_call = g_counts;
      const int64_t calls = stage_profile::calls_per_sample(opt.min_seconds, thread_cpu_seconds() - t0);
      std::printf("K=%" PRId64 " N=%" PRId64 " M=%" PRId64, p.k, p.n, p.m);
      stage_profile::print_medians(kern, p, all, all.size(), g_stages, opt.reps, calls);
      const int64_t panel = (p.n + 15) / 16 * 16 * p.k;  // int8 bytes of the whole decoded W
      std::printf(" tdp=%" PRId64 " decoded_over_panel=%.2f jobs=%" PRId64 "\n", per_call.tdp,
                  static_cast<double>(per_call.decoded_bytes) / static_cast<double>(panel),
                  stage_profile::jobs_of(kern, p.m, p.n));
      std::fflush(stdout);
    }
  }
  return 0;
}
