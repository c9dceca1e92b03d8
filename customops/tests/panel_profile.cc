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
// Prints the kernel's name and rows per panel group, then one line per (K, N, M): median microseconds of the
// whole call (quantize + every job of the driver's grid) and of the call without each stage, the step
// instructions per call (vpdpbusd, or vpmaddubsw + vpaddw) and the multiply-adds they make (padding rows
// included), the bytes of codes unpacked per call over the panel's codes as bytes, the job count, and "direct"
// where the call took the few-token path, which has no separate stages (its unpack is in registers). Before
// timing, the profiled kernel's output is checked bit for bit against the library's kernel of the same name:
// the switches must not change what the kernel computes. Exit 3 where this CPU does not run the ISA.
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
#include "stage_profile.h"

namespace {

using bitnet_onnx::i2s::I2SKernel;
using stage_profile::Problem;

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
  stage_profile::call(*library, ref, true);
  stage_profile::call(profiled, p, true);
  if (std::memcmp(ref.y.data(), p.y.data(), p.y.size() * sizeof(float)) == 0) return true;
  std::fprintf(stderr, "panel_profile: the profiled %s kernel differs from the library's at K=%" PRId64 " N=%" PRId64
               " M=%" PRId64 "\n", profiled.name, p.k, p.n, p.m);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  stage_profile::Options opt;
  if (!stage_profile::parse_options(argc, argv, &opt)) return 2;
  const I2SKernel& kern = *bitnet_onnx::i2s::mul::panel_profiled_kernel();
  const I2SKernel* library = library_kernel(kern);
  if (!library) return 3;
  // rows per panel group: the padded rows of a one-row weight
  std::printf("kernel %s rows_per_group=%zu\n", kern.name, kern.packed_bytes(1, 128) * 4 / 128);
  std::mt19937 rng(0);
  const auto all = stage_profile::variants<PanelStages>(
      {{"unpack", &PanelStages::unpack}, {"steps", &PanelStages::steps}, {"widen", &PanelStages::widen},
       {"emit", &PanelStages::emit}});
  for (const std::string& shape : opt.shapes) {
    Problem p;
    std::vector<uint8_t> i2s;
    if (!stage_profile::set_shape(kern, shape, rng, &p, &i2s)) return 2;
    for (const std::string& mstr : opt.ms) {
      const int64_t m = std::atoll(mstr.c_str());
      if (m <= 0) {
        std::fprintf(stderr, "bad M %s (a positive token count)\n", mstr.c_str());
        return 2;
      }
      p.set_tokens(m, rng);
      g_stages = PanelStages{};
      if (!same_as_library(kern, library, i2s, p)) return 1;
      g_counts = PanelCounters{};
      const double t0 = tool_support::thread_cpu_seconds();
      stage_profile::call(kern, p, true);
      const PanelCounters per_call = g_counts;
      const int64_t calls = stage_profile::calls_per_sample(opt.min_seconds, tool_support::thread_cpu_seconds() - t0);
      const bool direct = per_call.steps == 0;  // the few-token path: no stages to leave out, the whole call only
      std::printf("K=%" PRId64 " N=%" PRId64 " M=%" PRId64, p.k, p.n, p.m);
      stage_profile::print_medians(kern, p, all, direct ? 1 : all.size(), g_stages, opt.reps, calls);
      // the panel's codes, one byte each when unpacked: padded rows x K
      const int64_t codes = static_cast<int64_t>(kern.packed_bytes(p.n, p.k)) * 4;
      std::printf(" steps=%" PRId64 " macs=%" PRId64 " unpacked_over_codes=%.2f jobs=%" PRId64 "%s\n", per_call.steps,
                  p.m * codes, static_cast<double>(per_call.unpacked_bytes) / static_cast<double>(codes),
                  stage_profile::jobs_of(kern, p.m, p.n), direct ? " direct" : "");
      std::fflush(stdout);
    }
  }
  return 0;
}
