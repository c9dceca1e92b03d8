// Unicode NFC normalization of UTF-8 text (the NormalizeNFC op, docs/op.md), driven by tables the
// exporter takes from Python's unicodedata (bitnet_onnx/customops/normalize_nfc.py), so the graph
// carries the Unicode version it was exported with. Hangul syllables are (de)composed
// algorithmically and must not appear in the tables. Pure C++ (no ORT headers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace bitnet_onnx {
namespace text {

// The tables, entry by entry as the op's attributes hold them (int64, validated by build()).
struct CombiningClass {
  int64_t code_point, combining_class;  // class 1..254; absent code points have class 0
};
constexpr int64_t kNoSecond = -1;
struct Decomposition {
  int64_t code_point, first, second;  // canonical, one step; second = kNoSecond for a singleton
};
struct Composition {
  int64_t first, second, composite;  // primary composites only (composition exclusions removed)
};
struct NfcTables {
  std::vector<CombiningClass> combining_classes;
  std::vector<Decomposition> decompositions;
  std::vector<Composition> compositions;
};

// Why build() refused the tables: the table (named like the op's attribute), the entry and the problem.
struct NfcTableError {
  const char* table = "";
  size_t entry = 0;
  std::string problem;
};

// Where and why a text is not valid UTF-8.
struct Utf8Error {
  size_t byte_offset = 0;
  const char* problem = "";
};

// Per-caller working memory for normalize(), reused across calls (one per thread).
struct NfcScratch {
  std::vector<uint32_t> marks;  // code point | combining class << 24, of the segment being normalized
};

class NfcNormalizer {
 public:
  // The normalizer for these tables, or nullptr with *error set when they are malformed or
  // inconsistent (out-of-range code points, duplicates, decomposition cycles, a composition whose
  // composite does not decompose to its pair).
  static std::unique_ptr<NfcNormalizer> build(const NfcTables& tables, NfcTableError* error);

  // *out = NFC(text). False, with *error set and *out unspecified, when text is not valid UTF-8
  // (overlong forms, surrogates and code points beyond U+10FFFF included); never reads outside text.
  bool normalize(std::string_view text, std::string* out, Utf8Error* error, NfcScratch* scratch) const;

  // True when nothing before the code point can reorder or compose into it and it is its own NFC:
  // class 0, never the second of a composition, and either no decomposition or a precomposed
  // letter that NFC keeps whose decomposition starts with such a code point (é, ü, Hangul
  // syllables). Text made only of stable code points is its own NFC, and a text can be cut in
  // front of any of them.
  bool is_stable(char32_t cp) const {
    return cp >= unstable_.size() * 64 || !((unstable_[cp >> 6] >> (cp & 63)) & 1);
  }

 private:
  NfcNormalizer() = default;
  uint8_t combining_class(char32_t cp) const { return cp < classes_.size() ? classes_[cp] : 0; }
  // Appends the NFC of a valid UTF-8 segment that starts at a stable code point (or the text's start).
  void normalize_segment(std::string_view segment, std::string* out, NfcScratch* scratch) const;
  void decompose(char32_t cp, std::vector<uint32_t>* marks) const;
  char32_t compose(char32_t first, char32_t second) const;  // 0: no primary composite
  void mark_stable_composites(const std::unordered_set<char32_t>& seconds);

  std::vector<uint8_t> classes_;    // combining class by code point, up to the last nonzero one
  std::vector<uint64_t> unstable_;  // bit per code point: !is_stable
  bool ascii_stable_ = true;
  // code point -> [begin, end) of its full decomposition in expansions_
  std::unordered_map<char32_t, std::pair<uint32_t, uint32_t>> full_decompositions_;
  std::vector<char32_t> expansions_;
  std::unordered_map<uint64_t, char32_t> compositions_;  // first << 32 | second -> composite
};

}  // namespace text
}  // namespace bitnet_onnx
