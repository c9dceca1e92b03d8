#include "measured_choice.h"

#include <cinttypes>
#include <cstdio>
#include <limits>

namespace bitnet_onnx::i2s {

int m_bucket(int64_t m) {
  int bucket = 0;
  while (bucket < kLastBucket && (int64_t{1} << bucket) < m) ++bucket;
  return bucket;
}

int64_t bucket_first_m(int bucket) { return bucket == 0 ? 1 : (int64_t{1} << (bucket - 1)) + 1; }

int64_t bucket_last_m(int bucket) {
  return bucket == kLastBucket ? std::numeric_limits<int64_t>::max() : int64_t{1} << bucket;
}

FamilyPick MeasuredChoice::pick(const Candidates& candidates, Isa isa, int64_t m, int64_t k, int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[key_of(isa, m, k, n)];
  if (entry.chosen >= 0) return FamilyPick{entry.chosen, false};
  // Turns of kTurnCalls calls in table order (measured_choice.h): the family whose turns are fewest goes next.
  Family next = -1;
  for (Family f = 0; f < kFamilyCount; ++f)
    if (candidates.kernel[f] && entry.started[f] < kTrialsPerFamily &&
        (next < 0 || entry.started[f] / kTurnCalls < entry.started[next] / kTurnCalls))
      next = f;
  // Every trial handed out, some still running (concurrent calls): this call runs the base family untimed.
  if (next < 0) return FamilyPick{kBaseFamily, false};
  ++entry.started[next];
  return FamilyPick{next, true};
}

void MeasuredChoice::record(const Candidates& candidates, Isa isa, int64_t m, int64_t k, int64_t n, Family family,
                            double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[key_of(isa, m, k, n)];
  const double per_token = seconds * 1e9 / static_cast<double>(m);
  if (entry.done[family] == 0 || per_token < entry.best_per_token[family]) entry.best_per_token[family] = per_token;
  ++entry.done[family];
  Family fastest = -1;
  for (Family f = 0; f < kFamilyCount; ++f) {
    if (!candidates.kernel[f]) continue;
    if (entry.done[f] < kTrialsPerFamily) return;  // still measuring
    if (fastest < 0 || entry.best_per_token[f] < entry.best_per_token[fastest]) fastest = f;  // ties: table order
  }
  entry.chosen = fastest;
}

Family MeasuredChoice::chosen(Isa isa, int64_t m, int64_t k, int64_t n) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = entries_.find(key_of(isa, m, k, n));
  return found == entries_.end() ? -1 : found->second.chosen;
}

double MeasuredChoice::best_ns_per_token(Isa isa, int64_t m, int64_t k, int64_t n, Family family) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = entries_.find(key_of(isa, m, k, n));
  return found == entries_.end() || found->second.done[family] == 0 ? -1 : found->second.best_per_token[family];
}

std::string MeasuredChoice::json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = "[";
  for (const auto& [key, entry] : entries_) {
    char head[160];
    const int64_t last = key.bucket == kLastBucket ? -1 : bucket_last_m(key.bucket);
    std::snprintf(head, sizeof head, "{\"isa\": \"%s\", \"n\": %" PRId64 ", \"k\": %" PRId64 ", \"m_first\": %" PRId64
                  ", \"m_last\": %s", isa_table()[key.isa].name, key.n, key.k, bucket_first_m(key.bucket),
                  last < 0 ? "null" : std::to_string(last).c_str());
    std::string trials, times;
    for (Family f = 0; f < kFamilyCount; ++f) {
      if (entry.started[f] == 0) continue;
      const std::string name = std::string("\"") + family_name(f) + "\": ";
      trials += (trials.empty() ? "" : ", ") + name + std::to_string(entry.done[f]);
      char ns[32] = "null";
      if (entry.done[f] > 0) std::snprintf(ns, sizeof ns, "%.3f", entry.best_per_token[f]);
      times += (times.empty() ? "" : ", ") + name + ns;
    }
    const std::string runs = entry.chosen >= 0 ? std::string("\"") + family_name(entry.chosen) + "\"" : "null";
    out += std::string(out.size() > 1 ? ",\n " : "") + head + ", \"runs\": " + runs + ", \"trials\": {" + trials +
           "}, \"ns_per_token\": {" + times + "}}";
  }
  return out + "]";
}

MeasuredChoice& measured_choice() {
  static MeasuredChoice table;
  return table;
}

}  // namespace bitnet_onnx::i2s
