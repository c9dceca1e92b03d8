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
#include <string>

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
#include "stage_profile.h"

int main(int argc, char** argv) {
  const bitnet_onnx::i2s::I2SKernel& kern = *bitnet_onnx::i2s::mul::panel_profiled_kernel();
  // rows per panel group: the padded rows of a one-row weight
  auto header = [&](const bitnet_onnx::i2s::I2SKernel&) {
    return std::string("kernel ") + kern.name + " rows_per_group=" + std::to_string(kern.packed_bytes(1, 128) * 4 / 128);
  };
  const auto all = stage_profile::variants<PanelStages>(
      {{"unpack", &PanelStages::unpack}, {"steps", &PanelStages::steps}, {"widen", &PanelStages::widen},
       {"emit", &PanelStages::emit}});
  auto describe = [&](const stage_profile::Problem& p, const PanelCounters& per_call, bool* whole_only) {
    *whole_only = per_call.steps == 0;  // the few-token path: no stages to leave out, the whole call only
    // the panel's codes, one byte each when unpacked: padded rows x K
    const int64_t codes = static_cast<int64_t>(kern.packed_bytes(p.n, p.k)) * 4;
    char text[200];
    std::snprintf(text, sizeof text, "steps=%" PRId64 " macs=%" PRId64 " unpacked_over_codes=%.2f jobs=%" PRId64 "%s",
                  per_call.steps, p.m * codes, static_cast<double>(per_call.unpacked_bytes) / static_cast<double>(codes),
                  stage_profile::jobs_of(kern, p.m, p.n), *whole_only ? " direct" : "");
    return std::string(text);
  };
  return stage_profile::profile("panel_profile", argc, argv, kern, header, all, g_stages, g_counts, describe);
}
