// Where the co-issued kernel's time goes (issue 40): mixed-avx512vnni (i2s/mixed/), called as the op calls it on
// one thread, timed whole and with one stage left out at a time. One program per file of the kernel
// (customops/tests/CMakeLists.txt): mixed_profile includes i2s/mixed/avx512vnni.cc, mixed_profile_gfni
// avx512vnni_gfni.cc (MIXED_KERNEL_FILE), each compiled with that file's flags only, whose accessor the build
// renames to mixed_profiled_kernel, with the kernel's stage switches (BITNET_MIXED_RUN) and counters
// (BITNET_MIXED_COUNT) bound to the globals below; the library's copy has every stage compiled in. A stage's
// cost is the time it adds to the call (full time minus the time without it). Built and run by
// benchmarks/mixed_profile.py.
//
//   mixed_profile_gfni [--splits] --shapes 1024x2048,640x256 --m 16,128,512,2048 [--reps 7] [--min-seconds 0.05]
//
// Prints the kernel's name, its build, its split (vpdpbusd rows, lookup rows of each step) and whether the library's
// dispatch runs the GFNI build on this CPU (its kernel against the library's accessors), then one line per (K, N, M):
// median microseconds of the whole call (quantize + every job of the driver's grid) and of the call without each
// stage, then per call the multiply-adds of the vpdpbusd rows and of the lookup rows (over each token block's
// lanes: 32 tokens, or 16 for a last block of <= 16), the table entries built and the jobs. Before
// timing, the profiled kernel's output is checked bit for bit against the library's kernel of the same name (on
// a CPU with GFNI the library runs the GFNI build: mixed_profile then checks the other against it). Exit 3
// where this CPU does not run the profiled build.
//
// --splits (first): the split search instead of the stages. The kernel's split (how many of every step's rows
// run on vpdpbusd and how many on lookups, avx512vnni_kernel.h) is a compile-time constant; this program
// instantiates the same source at the other splits of kSplits, checks each bit for bit against the library, and
// times each one's whole call (`split_<vpdpbusd rows>:<lookup rows>=<us>`) interleaved with the library's split
// (`full`).
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

// The stages the profile can leave out, and what the kernel counts.
struct MixedStages {
  bool gathers = true;     // a token block's activation dwords of a K block (the tables' and the vpdpbusd operands)
  bool tables = true;      // the K block's 8 tables of 81 entries from those dwords
  bool multiplies = true;  // the vpdpbusd rows' codes (a shift and a mask, or GFNI) and vpdpbusd
  bool lookups = true;     // the lookup rows' table offsets, entry loads and vpaddw
  bool widen = true;       // the lookup rows' int16 sums -> int32, every few K blocks
  bool emit = true;        // the int32 sums -> (float(sum) / a) * s_w into Y, transposed to token rows
  bool prefetch = true;    // the output lines fetched for writing before each chunk's last sweep (a saving: < 0)
};
struct MixedCounters {
  int64_t mul_macs = 0;       // multiply-adds of the vpdpbusd rows (over a block's token lanes, padding included)
  int64_t lookup_macs = 0;    // multiply-adds of the lookup rows (likewise)
  int64_t table_entries = 0;  // table entries built
};
namespace {
MixedStages g_stages;
MixedCounters g_counts;
}  // namespace
#define BITNET_MIXED_RUN(stage) (g_stages.stage)
#define BITNET_MIXED_COUNT(counter, n) (g_counts.counter += (n))
#define MIXED_QUOTE(file) #file
#define MIXED_SOURCE(file) MIXED_QUOTE(file)
#include MIXED_SOURCE(MIXED_KERNEL_FILE)
#include "cpu_features.h"
#include "stage_profile.h"

namespace {

namespace mixed = bitnet_onnx::i2s::mixed;

#if defined(__GFNI__)
constexpr bool kGfniBuild = true;
// Whether the library's dispatch runs the GFNI build: here, anything but the library's plain build (the GFNI
// build's accessor is this program's, renamed)
bool library_runs_gfni(const bitnet_onnx::i2s::I2SKernel& library) { return &library != mixed::avx512vnni_kernel(); }
#else
constexpr bool kGfniBuild = false;
bool library_runs_gfni(const bitnet_onnx::i2s::I2SKernel& library) {
  return &library == mixed::avx512vnni_gfni_kernel();
}
#endif

// The splits --splits times besides the kernel's own: (vpdpbusd rows, lookup rows) per step, 0 meaning that
// half is not used at all (every row on lookups, or every row on vpdpbusd).
template <int kMul, int kLut>
const bitnet_onnx::i2s::I2SKernel* split_kernel(const char* name) {
  static const bitnet_onnx::i2s::I2SKernel kernel =
      mixed::mixed_kernel<mixed::MixedDot<bitnet_onnx::simd::Zmm, kMul, kLut, kGfniBuild>,
                          mixed::MixedDot<bitnet_onnx::simd::Ymm, kMul, kLut, kGfniBuild>>(name);
  return &kernel;
}
#define MIXED_SPLIT(mul, lut) {mul, lut, split_kernel<mul, lut>("mixed-avx512vnni split " #mul ":" #lut)}
struct Split {
  int mul_rows, lut_rows;
  const bitnet_onnx::i2s::I2SKernel* kernel;
};
const Split kSplits[] = {MIXED_SPLIT(1, 1), MIXED_SPLIT(1, 2), MIXED_SPLIT(1, 3), MIXED_SPLIT(1, 4),
                         MIXED_SPLIT(2, 1), MIXED_SPLIT(2, 2), MIXED_SPLIT(2, 3), MIXED_SPLIT(3, 4),
                         MIXED_SPLIT(1, 0), MIXED_SPLIT(0, 1)};

// The whole call of every split of kSplits but the kernel's own (the variant "full").
std::vector<stage_profile::Variant<MixedStages>> split_variants() {
  std::vector<stage_profile::Variant<MixedStages>> all{{"full", MixedStages{}, true}};
  for (const Split& s : kSplits)
    if (s.mul_rows != mixed::kMulRows || s.lut_rows != mixed::kLutRows)
      all.push_back({"split_" + std::to_string(s.mul_rows) + ":" + std::to_string(s.lut_rows), MixedStages{}, true,
                     s.kernel});
  return all;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GFNI__)
  if (!bitnet_onnx::cpu_features().avx512vnni_gfni) {
    std::fprintf(stderr, "mixed_profile: this CPU lacks AVX512-VNNI with GFNI (the kernel's GFNI build)\n");
    return 3;
  }
#endif
  const bitnet_onnx::i2s::I2SKernel& kern = *mixed::mixed_profiled_kernel();
  auto header = [&](const bitnet_onnx::i2s::I2SKernel& library) {
    return std::string("kernel ") + kern.name + " gfni=" + (kGfniBuild ? "1" : "0") + " mul_rows=" +
           std::to_string(mixed::kMulRows) + " lut_rows=" + std::to_string(mixed::kLutRows) +
           " library_gfni=" + (library_runs_gfni(library) ? "1" : "0");
  };
  const bool splits = argc > 1 && std::string(argv[1]) == "--splits";
  if (splits) --argc, ++argv;  // the rest is the profilers' command line (stage_profile.h)
  const auto all = splits ? split_variants()
                          : stage_profile::variants<MixedStages>(
                                {{"gathers", &MixedStages::gathers}, {"tables", &MixedStages::tables},
                                 {"multiplies", &MixedStages::multiplies}, {"lookups", &MixedStages::lookups},
                                 {"widen", &MixedStages::widen}, {"emit", &MixedStages::emit},
                                 {"prefetch", &MixedStages::prefetch}});
  auto describe = [&](const stage_profile::Problem& p, const MixedCounters& per_call, bool* whole_only) {
    *whole_only = false;
    char text[200];
    std::snprintf(text, sizeof text,
                  "mul_macs=%" PRId64 " lookup_macs=%" PRId64 " table_entries=%" PRId64 " jobs=%" PRId64,
                  per_call.mul_macs, per_call.lookup_macs, per_call.table_entries,
                  stage_profile::jobs_of(kern, p.m, p.n));
    return std::string(text);
  };
  return stage_profile::profile("mixed_profile", argc, argv, kern, header, all, g_stages, g_counts, describe);
}
