// The I2STernaryMatMul driver: everything between the op's validated tensors and the kernels.
// Packs W into the kernel's layout, quantizes every token once, splits the (token tile x output
// tile) dot over the host's thread pool and applies y = (float(sum) / a[m]) * s_w. Pure C++ (no
// ORT headers): the ORT glue (customops/ort/i2s_matmul_op.cc) validates inputs, gets the output
// and calls MatMul::run with its pool (ParallelFor).
//
// Kernel families (family.h, the seam; families.h, the table): a family is a folder of I2SKernel
// tables, one IsaRow array over the ISA table (mul/: the multiply kernels; lut/: the lookup
// kernels). A node's MatMul holds the kernels every family has for the node's ISA (its
// Candidates) and, for each call, picks one of them by (ISA, M, K, N): by timing them on this host
// (measured_choice.h, the default), by the families' compiled rules (select_family), or the family
// BITNET_ONNX_KERNEL forces; a constant W is packed once for each family that may run it. The
// driver names no family: it reads the table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "families.h"
#include "isa.h"

namespace bitnet_onnx::i2s {

constexpr int64_t kBlock = 128;  // K is a multiple of this (the I2_S block)
// The widest K every kernel sums exactly (tests/test_op_validation.py checks it on each ISA):
// the largest multiple of 128 whose sums |sum_k q * T| <= 128 * K fit int32, i.e. K < 2^24. The
// kernels' int32 lanes wrap, so partial sums of unsigned codes (up to 2 * 128 * K) and the qsum
// correction are exact modulo 2^32, hence exact once the result fits (int16 sums are bounded per
// block, whatever K). The one step that is not modular, the x86 one-token path's rescaling
// shifts, serves K <= 2^19 only (i2s_panel/x86_dot.h). Real projections have K <= 16384.
constexpr int64_t kMaxK = (int64_t{1} << 24) - kBlock;

// The host's thread pool: runs job(arg, i) for every i < count, on any threads, and returns when
// all are done (ORT's KernelContext::ParallelFor, or a plain loop).
struct ParallelFor {
  void* pool = nullptr;
  void (*run)(void* pool, void (*job)(void* arg, size_t i), size_t count, void* arg) = nullptr;
};

// Cache-line aligned bytes for a packed weight matrix (SIMD kernels may use aligned loads).
struct AlignedBytes {
  std::unique_ptr<uint8_t, void (*)(void*)> ptr{nullptr, std::free};
  size_t size = 0;
  explicit AlignedBytes(size_t n = 0);
  uint8_t* data() const { return ptr.get(); }
};

// How a node picks its family per call: BITNET_ONNX_KERNEL unset, empty or "measure" (kMeasureValue):
// measured on this host, per shape (measured_choice.h); "rules" (kRulesValue): the families' compiled
// rules (FamilyRule, family.h), the same on every host; a family's name: that family for every call.
enum class FamilyChoice { kMeasured, kRules, kForced };
inline constexpr const char* kMeasureValue = "measure";
inline constexpr const char* kRulesValue = "rules";

// The kernels a node may run, one per family of the table (null: the family has none for the
// ISA). The base family's kernel is always there: it serves every shape. The others (e.g. the
// lookup kernels, lut/) do fewer instructions per weight at some shapes; docs/op.md, "Kernel families".
struct Candidates {
  const I2SKernel* kernel[kFamilyCount] = {};
  FamilyChoice choice = FamilyChoice::kMeasured;
  Family only = kBaseFamily;  // kForced: the family every shape runs
};

// The family one call runs, and whether it is a trial of the measured choice (the call is timed).
struct FamilyPick {
  Family family;
  bool timed;
};

// Every family's kernel for `isa` (a built record of the ISA table) and how they are chosen from
// `forced_family`, BITNET_ONNX_KERNEL's value (FamilyChoice). False (with *error naming
// BITNET_ONNX_KERNEL) when the value is unknown or the ISA has no kernel of that family.
bool candidates_for(Isa isa, const char* forced_family, Candidates* out, std::string* error);

// The per-call choice of kernel family by the compiled rules (or the forced family): which candidate
// runs m tokens against an [n, k] W on `isa` when nothing is measured (FamilyChoice::kRules and
// kForced; kMeasured nodes ask measured_choice.h). Returns a family whose candidate is non-null.
Family select_family(const Candidates& candidates, Isa isa, int64_t m, int64_t k, int64_t n);

// Whether a node can run `family` for some m with this [n, k] W: constant weights are packed only
// for the families that may run them (every family the ISA has, when measured).
bool family_possible(const Candidates& candidates, Isa isa, Family family, int64_t k, int64_t n);

// One call's tensors, validated by the caller: x [m, k] float32, W either packed at init
// (MatMul::set_weights) or given here as I2_S bytes [n, k/4], norm (optional) [k] float32,
// y [m, n] float32.
struct Call {
  const float* x = nullptr;
  int64_t m = 0, k = 0, n = 0;
  const uint8_t* w_i2s = nullptr;  // null: the constant W of set_weights
  const float* norm = nullptr;
  float eps = 0.0f;
  float s_w = 1.0f;
  float* y = nullptr;
};

// One node's kernels and (when constant) its packed W.
class MatMul {
 public:
  // No kernels yet (a node's state before its init); assign a MatMul(isa, family) before use.
  MatMul() = default;
  // The candidate kernels of `isa` and how a call picks one (`forced_family`, BITNET_ONNX_KERNEL's
  // value: FamilyChoice). Throws std::invalid_argument naming the variable when the
  // family is unknown or `isa` has no such kernel.
  MatMul(Isa isa, const char* forced_family);

  // Packs a constant W (I2_S bytes [n, k/4]) for every candidate kernel, once per layout (I2SKernel::layout).
  // Throws bad_alloc.
  void set_weights(const uint8_t* i2s, int64_t n, int64_t k);
  bool has_weights() const { return has_weights_; }
  int64_t weights_n() const { return w_n_; }
  int64_t weights_k() const { return w_k_; }

  // y = BitLinear(x): k % kBlock == 0, 0 < k <= kMaxK, n (and k) those of set_weights when W is
  // constant. Throws std::bad_alloc when scratch cannot be allocated.
  void run(const Call& call, const ParallelFor& pool) const;

 private:
  FamilyPick family_for(int64_t m, int64_t k, int64_t n) const;

  Isa isa_ = kIsaScalar;
  Candidates candidates_;
  bool has_weights_ = false;
  int64_t w_n_ = 0, w_k_ = 0;
  AlignedBytes packed_[kFamilyCount];  // the constant W in each candidate's layout (empty where shared)
  Family packed_in_[kFamilyCount] = {};  // whose packed_ each family reads: its own, or a family's of its layout
};

}  // namespace bitnet_onnx::i2s
