// The kernel family a call runs, measured on the host that runs it (docs/op.md, "Kernel families").
// Which bit-exact family is fastest depends on the CPU in ways no compiled table covers (the order
// of mul and lut flips between Zen 4, Zen 5, Sapphire Rapids and AVX2-only cores), so by default the
// driver times the candidates on the calls it serves: for each (ISA, N, K, M bucket) the first
// kTrialsPerFamily calls of every candidate family are timed, the families taking turns of kTurnCalls calls, and
// from then on the fastest one (its best time per token) runs. Every call computes its real output (each family's
// bits are the same), so measuring costs only the slower candidates' few calls; no file is read or
// written. One table per process, shared by every node and session of the same shape and ISA, under
// a mutex: safe for concurrent runs. Pure C++, no ORT headers.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "driver.h"
#include "families.h"
#include "isa.h"

namespace bitnet_onnx::i2s {

// Timed calls per candidate family before the choice is made (3 turns of kTurnCalls): the best of them
// leaves out the calls that a cold cache, a page fault or another process slowed down (with 3 calls in all,
// a loaded 2-core machine picked the slower family of two 15% apart).
constexpr int kTrialsPerFamily = 6;

// Calls a family runs in a row in each of its turns. In a row, a family's second call finds its weights where the
// first left them (single calls taking turns evicted each other's layout: on Zen 4 the lookups then won gate/up's
// M = 16, where multiply is 16% faster on its own); in turns, every family is timed across the whole window (all
// of one family's trials before the other's let a slower phase of the machine fall on one family only: up to 17%
// missed on a 2-vCPU VM whose speed drifts over seconds).
constexpr int kTurnCalls = 2;

// Calls of M tokens share a choice with the calls of their bucket: M = 1 is bucket 0, and
// 2^(b-1) < M <= 2^b bucket b (M = 16 is the top of bucket 4), up to kLastBucket, which holds every
// M above 2^(kLastBucket - 1).
constexpr int kLastBucket = 14;
int m_bucket(int64_t m);
int64_t bucket_first_m(int bucket);  // the smallest M of the bucket
int64_t bucket_last_m(int bucket);   // the largest (INT64_MAX for the last bucket)

class MeasuredChoice {
 public:
  // The family a call of m tokens against an [n, k] W on `isa` runs, among `candidates`' non-null
  // kernels (the same set for every call of one ISA: all the families the ISA has); a timed pick is a
  // trial, whose time the caller hands to record().
  FamilyPick pick(const Candidates& candidates, Isa isa, int64_t m, int64_t k, int64_t n);

  // A timed call's duration (MatMul::run: the calling thread's CPU time when every job ran on it, else the
  // wall clock); the choice is made once every candidate has kTrialsPerFamily.
  void record(const Candidates& candidates, Isa isa, int64_t m, int64_t k, int64_t n, Family family,
              double seconds);

  // The family chosen for calls like this one; -1 while none is (still measuring, or never run).
  Family chosen(Isa isa, int64_t m, int64_t k, int64_t n) const;

  // The best time per token (ns) `family`'s trials recorded for calls like this one; -1 before its first.
  double best_ns_per_token(Isa isa, int64_t m, int64_t k, int64_t n, Family family) const;

  // Every shape this table measured or is measuring, as a JSON array: {"isa", "n", "k", "m_first",
  // "m_last", "runs" (the chosen family, null while measuring), "trials" and "ns_per_token" (each
  // candidate family's timed calls and best time per token, by family name)}.
  std::string json() const;

 private:
  struct Key {
    Isa isa;
    int64_t n, k;
    int bucket;
    bool operator<(const Key& o) const { return std::tie(isa, n, k, bucket) < std::tie(o.isa, o.n, o.k, o.bucket); }
  };
  struct Entry {
    int started[kFamilyCount] = {};  // trials handed out (the family whose turn it is goes next)
    int done[kFamilyCount] = {};
    double best_per_token[kFamilyCount] = {};
    Family chosen = -1;
  };
  static Key key_of(Isa isa, int64_t m, int64_t k, int64_t n) { return Key{isa, n, k, m_bucket(m)}; }

  mutable std::mutex mutex_;
  std::map<Key, Entry> entries_;
};

// The process's table, the one the op's nodes share.
MeasuredChoice& measured_choice();

}  // namespace bitnet_onnx::i2s
