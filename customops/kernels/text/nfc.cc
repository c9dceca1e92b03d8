// NFC = canonical decomposition, canonical ordering of combining marks, canonical composition
// (Unicode Standard Annex #15). The text is scanned once: runs of stable code points (see
// NfcNormalizer::is_stable) are copied as they are, and only the segments around unstable ones,
// each starting at the stable code point in front of it, go through the three steps.
#include "nfc.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_set>
#include <utility>

#include "utf8.h"

namespace bitnet_onnx {
namespace text {
namespace {

constexpr size_t kNone = static_cast<size_t>(-1);
constexpr int64_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxDecompositionDepth = 32;  // Unicode needs 4; deeper means a cycle in the table
constexpr size_t kMaxDecompositionLength = 18;  // Unicode's bound (canonical ones stay within 4)

// Hangul syllables and jamo (Unicode 3.12, conjoining jamo behavior).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

bool is_hangul_syllable(int64_t cp) { return cp >= kSBase && cp < kSBase + kSCount; }

// marks entries: code point in bits 0-20, combining class in bits 24-31.
constexpr uint32_t kCodePointMask = 0xFFFFFF;
uint32_t mark(char32_t cp, uint8_t ccc) { return static_cast<uint32_t>(cp) | static_cast<uint32_t>(ccc) << 24; }
uint8_t class_of(uint32_t m) { return static_cast<uint8_t>(m >> 24); }
char32_t code_point_of(uint32_t m) { return m & kCodePointMask; }

std::string hex(int64_t cp) {
  char buf[24];
  std::snprintf(buf, sizeof buf, cp >= 0 && cp <= 0xFFFFFFF ? "U+%04llX" : "%lld", static_cast<long long>(cp));
  return buf;
}

bool is_scalar_value(int64_t cp) { return cp >= 0 && cp <= kMaxCodePoint && !(cp >= 0xD800 && cp <= 0xDFFF); }

// Index just past the run of ASCII bytes starting at s[i].
size_t skip_ascii(const unsigned char* s, size_t n, size_t i) {
  for (uint64_t word; i + 8 <= n; i += 8) {
    std::memcpy(&word, s + i, 8);
    if (word & 0x8080808080808080ull) break;
  }
  while (i < n && s[i] < 0x80) ++i;
  return i;
}

// Stable sort of each run of nonzero combining classes by class (canonical ordering).
void canonical_order(std::vector<uint32_t>* marks) {
  auto by_class = [](uint32_t a, uint32_t b) { return class_of(a) < class_of(b); };
  auto it = marks->begin();
  const auto end = marks->end();
  while (it != end) {
    if (class_of(*it) == 0) {
      ++it;
      continue;
    }
    auto run_end = std::find_if(it, end, [](uint32_t m) { return class_of(m) == 0; });
    if (run_end - it <= 32) {  // typical: a few marks; insertion sort without allocating
      for (auto j = it + 1; j < run_end; ++j)
        for (auto k = j; k > it && by_class(*k, *(k - 1)); --k) std::iter_swap(k, k - 1);
    } else {  // long runs (adversarial input): O(n log n)
      std::stable_sort(it, run_end, by_class);
    }
    it = run_end;
  }
}

// Records why the tables are refused; returns the no-normalizer result of build().
std::unique_ptr<NfcNormalizer> fail(NfcTableError* error, const char* table, size_t entry, std::string problem) {
  *error = NfcTableError{table, entry, std::move(problem)};
  return nullptr;
}

}  // namespace

std::unique_ptr<NfcNormalizer> NfcNormalizer::build(const NfcTables& tables, NfcTableError* error) {
  std::unique_ptr<NfcNormalizer> nfc(new NfcNormalizer());
  std::vector<char32_t> unstable;  // code points to flag in unstable_

  // Combining classes.
  std::unordered_set<int64_t> seen;
  for (size_t e = 0; e < tables.combining_classes.size(); ++e) {
    const auto& entry = tables.combining_classes[e];
    if (!is_scalar_value(entry.code_point))
      return fail(error, "combining_classes", e,
                  "code point " + hex(entry.code_point) + " is not a Unicode scalar value");
    if (entry.combining_class < 0 || entry.combining_class > 254)
      return fail(error, "combining_classes", e, "class " + std::to_string(entry.combining_class) + " of " +
                      hex(entry.code_point) + " is outside 0..254");
    if (!seen.insert(entry.code_point).second)
      return fail(error, "combining_classes", e, hex(entry.code_point) + " is listed twice");
    if (entry.combining_class == 0) continue;
    if (nfc->classes_.size() <= static_cast<size_t>(entry.code_point)) nfc->classes_.resize(entry.code_point + 1, 0);
    nfc->classes_[entry.code_point] = static_cast<uint8_t>(entry.combining_class);
    unstable.push_back(static_cast<char32_t>(entry.code_point));
  }

  // Decompositions: one step each in the table, expanded here to full decompositions.
  std::unordered_map<char32_t, std::pair<char32_t, int64_t>> one_step;
  for (size_t e = 0; e < tables.decompositions.size(); ++e) {
    const auto& d = tables.decompositions[e];
    for (int64_t cp : {d.code_point, d.first})
      if (!is_scalar_value(cp))
        return fail(error, "decompositions", e, "code point " + hex(cp) + " is not a Unicode scalar value");
    if (d.second != kNoSecond && !is_scalar_value(d.second))
      return fail(error, "decompositions", e, "second " + hex(d.second) +
                      " is neither a Unicode scalar value nor -1 (a singleton)");
    if (is_hangul_syllable(d.code_point))
      return fail(error, "decompositions", e, hex(d.code_point) +
                      " is a Hangul syllable (decomposed algorithmically, never listed)");
    const auto mapping = std::make_pair(static_cast<char32_t>(d.first), d.second);
    if (!one_step.emplace(static_cast<char32_t>(d.code_point), mapping).second)
      return fail(error, "decompositions", e, hex(d.code_point) + " is listed twice");
  }
  for (size_t e = 0; e < tables.decompositions.size(); ++e) {
    const char32_t cp = static_cast<char32_t>(tables.decompositions[e].code_point);
    const uint32_t begin = static_cast<uint32_t>(nfc->expansions_.size());
    // Depth-first expansion with an explicit stack of (code point, depth).
    std::vector<std::pair<char32_t, int>> stack{{cp, 0}};
    while (!stack.empty()) {
      const auto [top, depth] = stack.back();
      stack.pop_back();
      const auto found = one_step.find(top);
      if (found == one_step.end()) {
        nfc->expansions_.push_back(top);
        continue;
      }
      if (depth >= kMaxDecompositionDepth)
        return fail(error, "decompositions", e, "the decomposition of " + hex(cp) + " does not end (a cycle)");
      const size_t children = found->second.second == kNoSecond ? 1 : 2;
      if (nfc->expansions_.size() - begin + stack.size() + children > kMaxDecompositionLength)  // a lower bound
        return fail(error, "decompositions", e, "the decomposition of " + hex(cp) + " is longer than " +
                        std::to_string(kMaxDecompositionLength) + " code points");
      if (found->second.second != kNoSecond) stack.push_back({static_cast<char32_t>(found->second.second), depth + 1});
      stack.push_back({found->second.first, depth + 1});
    }
    nfc->full_decompositions_[cp] = {begin, static_cast<uint32_t>(nfc->expansions_.size())};
    unstable.push_back(cp);
  }

  // Primary compositions.
  std::unordered_set<char32_t> seconds;  // code points that compose with what precedes them
  for (size_t e = 0; e < tables.compositions.size(); ++e) {
    const auto& c = tables.compositions[e];
    for (int64_t cp : {c.first, c.second, c.composite})
      if (!is_scalar_value(cp))
        return fail(error, "compositions", e, "code point " + hex(cp) + " is not a Unicode scalar value");
    if (is_hangul_syllable(c.composite))
      return fail(error, "compositions", e, hex(c.composite) +
                      " is a Hangul syllable (composed algorithmically, never listed)");
    const auto d = one_step.find(static_cast<char32_t>(c.composite));
    if (d == one_step.end() || d->second.first != c.first || d->second.second != c.second)
      return fail(error, "compositions", e, hex(c.first) + " + " + hex(c.second) + " -> " + hex(c.composite) +
                      " disagrees with decompositions (" + hex(c.composite) + " must decompose to that pair)");
    const uint64_t key = static_cast<uint64_t>(c.first) << 32 | static_cast<uint64_t>(c.second);
    if (!nfc->compositions_.emplace(key, static_cast<char32_t>(c.composite)).second)
      return fail(error, "compositions", e, "the pair " + hex(c.first) + " + " + hex(c.second) + " is listed twice");
    seconds.insert(static_cast<char32_t>(c.second));
  }

  // Jamo that combine with what precedes them: vowels (after L) and trailing consonants (after LV).
  for (char32_t v = kVBase; v < kVBase + kVCount; ++v) seconds.insert(v);
  for (char32_t t = kTBase + 1; t < kTBase + kTCount; ++t) seconds.insert(t);
  unstable.insert(unstable.end(), seconds.begin(), seconds.end());

  const char32_t last = *std::max_element(unstable.begin(), unstable.end());
  nfc->unstable_.assign(last / 64 + 1, 0);
  for (char32_t cp : unstable) nfc->unstable_[cp >> 6] |= uint64_t{1} << (cp & 63);
  nfc->mark_stable_composites(seconds);
  for (char32_t cp = 0; cp < 0x80; ++cp) nfc->ascii_stable_ = nfc->ascii_stable_ && nfc->is_stable(cp);
  return nfc;
}

// A precomposed code point (é, ü, ờ) is stable too when it is its own NFC and its decomposition
// starts with a stable starter: nothing before it can then reorder or compose into it, and when
// the next code point is stable as well it stays as it is. (Unicode's NFC_Quick_Check = Yes with
// class 0, minus decompositions starting with a composing starter.) Real text is mostly these.
void NfcNormalizer::mark_stable_composites(const std::unordered_set<char32_t>& seconds) {
  NfcScratch scratch;
  std::string alone, normalized;
  for (const auto& [cp, range] : full_decompositions_) {
    const char32_t head = expansions_[range.first];
    if (combining_class(cp) != 0 || !is_stable(head) || seconds.count(cp)) continue;
    alone.clear();
    normalized.clear();
    append_utf8(cp, &alone);
    normalize_segment(alone, &normalized, &scratch);
    if (normalized == alone) unstable_[cp >> 6] &= ~(uint64_t{1} << (cp & 63));
  }
}

bool NfcNormalizer::normalize(std::string_view text, std::string* out, Utf8Error* error, NfcScratch* scratch) const {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  out->clear();
  size_t emitted = 0;        // text[0, emitted) is in *out
  size_t segment = kNone;    // start of the pending unstable segment
  size_t previous = kNone;   // start of the previous code point
  auto flush_segment = [&](size_t end) {
    out->append(text.data() + emitted, segment - emitted);
    normalize_segment(text.substr(segment, end - segment), out, scratch);
    emitted = end;
    segment = kNone;
  };
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80 && ascii_stable_) {
      if (segment != kNone) flush_segment(i);
      i = skip_ascii(s, n, i + 1);
      previous = i - 1;
      continue;
    }
    char32_t cp = 0;
    const char* problem = "";
    const size_t len = decode_utf8(s, n, i, &cp, &problem);
    if (len == 0) {
      *error = Utf8Error{i, problem};
      return false;
    }
    if (is_stable(cp)) {
      if (segment != kNone) flush_segment(i);
    } else if (segment == kNone) {
      // Everything before is stable: the segment starts at the previous code point, the last
      // one the unstable code point may compose with.
      segment = previous == kNone ? i : previous;
    }
    previous = i;
    i += len;
  }
  if (segment != kNone) flush_segment(n);
  out->append(text.data() + emitted, n - emitted);
  return true;
}

void NfcNormalizer::decompose(char32_t cp, std::vector<uint32_t>* marks) const {
  if (is_hangul_syllable(cp)) {
    const char32_t index = cp - kSBase;
    marks->push_back(mark(kLBase + index / kNCount, 0));
    marks->push_back(mark(kVBase + index % kNCount / kTCount, 0));
    if (index % kTCount) marks->push_back(mark(kTBase + index % kTCount, 0));
    return;
  }
  const auto found = full_decompositions_.find(cp);
  if (found == full_decompositions_.end()) {
    marks->push_back(mark(cp, combining_class(cp)));
    return;
  }
  for (uint32_t k = found->second.first; k < found->second.second; ++k)
    marks->push_back(mark(expansions_[k], combining_class(expansions_[k])));
}

char32_t NfcNormalizer::compose(char32_t first, char32_t second) const {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (is_hangul_syllable(first) && (first - kSBase) % kTCount == 0 && second > kTBase && second < kTBase + kTCount)
    return first + (second - kTBase);
  const auto found = compositions_.find(static_cast<uint64_t>(first) << 32 | second);
  return found == compositions_.end() ? 0 : found->second;
}

void NfcNormalizer::normalize_segment(std::string_view segment, std::string* out, NfcScratch* scratch) const {
  std::vector<uint32_t>& marks = scratch->marks;
  marks.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(segment.data());
  for (size_t i = 0; i < segment.size();) {
    char32_t cp = 0;
    const char* problem = "";
    const size_t len = decode_utf8(s, segment.size(), i, &cp, &problem);  // validated by normalize()
    if (len == 0) break;
    decompose(cp, &marks);
    i += len;
  }
  canonical_order(&marks);

  // Canonical composition in place: each code point joins the last starter unless blocked by a
  // mark in between of class 0 or >= its own (after ordering, the last kept mark is the largest).
  size_t starter = kNone, kept = 0;
  for (size_t r = 0; r < marks.size(); ++r) {
    const uint32_t m = marks[r];
    if (starter != kNone && (kept == starter + 1 || class_of(marks[kept - 1]) < class_of(m))) {
      const char32_t composite = compose(code_point_of(marks[starter]), code_point_of(m));
      if (composite) {
        marks[starter] = mark(composite, combining_class(composite));
        continue;
      }
    }
    if (class_of(m) == 0) starter = kept;
    marks[kept++] = m;
  }
  for (size_t k = 0; k < kept; ++k) append_utf8(code_point_of(marks[k]), out);
}

}  // namespace text
}  // namespace bitnet_onnx
