// Where a call's time goes, phase by phase, for benchmarks only (customops/tests/attention_phases.cc):
// driver.cc compiled with BITNET_ONNX_ATTENTION_PHASES adds each phase's elapsed nanoseconds to this
// thread's counters; the op library's build compiles the same code without them (PHASE runs the
// statement alone), so its outputs and speed are untouched.
#pragma once

#include <chrono>
#include <cstdint>

namespace bitnet_onnx {
namespace attention {

// The steps of one call: the plan (mask summary, K and V repacked), then per job the queries scaled and
// packed, and per key tile the scores, the mask of edge tiles, the online softmax (bf16: p rounded and
// packed too) and p . v, and at the end o / l written out.
enum Phase { kPhasePlan, kPhaseQuery, kPhaseScores, kPhaseMask, kPhaseSoftmax, kPhasePv, kPhaseOutput, kPhaseCount };

inline const char* const kPhaseNames[kPhaseCount] = {"plan", "query", "scores", "mask", "softmax", "pv", "output"};

inline thread_local int64_t phase_ns[kPhaseCount] = {};

inline int64_t phase_clock() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace attention
}  // namespace bitnet_onnx

#ifdef BITNET_ONNX_ATTENTION_PHASES
#define BITNET_ONNX_PHASE(phase, ...)                                      \
  do {                                                                     \
    const int64_t phase_start_ = ::bitnet_onnx::attention::phase_clock(); \
    __VA_ARGS__;                                                           \
    ::bitnet_onnx::attention::phase_ns[phase] += ::bitnet_onnx::attention::phase_clock() - phase_start_; \
  } while (0)
#else
#define BITNET_ONNX_PHASE(phase, ...) \
  do {                                \
    __VA_ARGS__;                      \
  } while (0)
#endif
