// Checks the text kernels (customops/kernels/text: NfcNormalizer, ByteFallbackBpe) without ONNX
// Runtime: exact results against reference vectors written by tests/kernel_vectors/make_text_vectors.py (unicodedata,
// the tokenizers library), then hostile input that must give an error or a result, never a crash
// or a read out of bounds (tests/test_kernels_native.py runs this under ASan + UBSan too).
//
//   text_kernel_test [--seed N] [--rounds N] [--mutations N] DIR
//
// DIR/index.txt lists "nfc NAME" / "bpe NAME" lines, each with NAME.tables and NAME.vectors (the
// format is tests/kernel_vectors/make_text_vectors.py's). For each table set:
//   vectors    every case: the reference result (BPE: and max_tokens = half its ids giving their
//              first half), or the error at the reference byte offset;
//   stress     --rounds seeded hostile texts (random bytes, truncated sequences, overlong forms,
//              surrogates, > U+10FFFF, long runs of combining marks or of one character, added-token
//              prefixes, empty) plus 1 MB texts: an error exactly when an independent UTF-8 check
//              says invalid, at its offset; otherwise valid UTF-8 out and NFC idempotent (NFC), ids
//              of the tables only and max_tokens giving the prefix (BPE);
//   malformed  tables with out-of-range values, duplicates, cycles, truncated arrays: build()
//              refuses each with the attribute named; then seeded random mutations of the tables:
//              refused cleanly, or built and run on hostile texts with the same checks
//              (malformed and mutations: NFC tables and BPE tables of at most kMutatedVocabLimit tokens).
// Last line: "N passed, N failed".
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bpe.h"
#include "nfc.h"

namespace {

using bitnet_onnx::text::BpeResult;
using bitnet_onnx::text::BpeTableError;
using bitnet_onnx::text::BpeTables;
using bitnet_onnx::text::ByteFallbackBpe;
using bitnet_onnx::text::NfcNormalizer;
using bitnet_onnx::text::NfcScratch;
using bitnet_onnx::text::NfcTableError;
using bitnet_onnx::text::NfcTables;
using bitnet_onnx::text::Utf8Error;

constexpr int64_t kValid = -1;                     // a vector's status when its input is valid UTF-8
constexpr size_t kMegabyte = 1 << 20;
constexpr size_t kMutatedVocabLimit = 5000;        // mutation fuzzing rebuilds the tables each time
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min(), kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

// --- results ---------------------------------------------------------------------------------------

int g_passed = 0, g_failed = 0;
constexpr int kMaxReported = 40;

bool check(bool ok, const std::string& what, const std::string& detail = "") {
  (ok ? g_passed : g_failed) += 1;
  if (!ok && g_failed <= kMaxReported) std::printf("FAIL %s: %s\n", what.c_str(), detail.c_str());
  if (!ok && g_failed == kMaxReported + 1) std::printf("(further failures not shown)\n");
  return ok;
}

// A byte string for messages: printable ASCII as is, the rest as \xHH, cut after 60 bytes.
std::string shown(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 60; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b >= 0x20 && b < 0x7F && b != '\\') {
      out += static_cast<char>(b);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", b);
      out += buf;
    }
  }
  if (s.size() > 60) out += "... (" + std::to_string(s.size()) + " bytes)";
  return "'" + out + "'";
}

std::string ids_str(const std::vector<int64_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size() && i < 24; ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + (ids.size() > 24 ? ", ... (" + std::to_string(ids.size()) + " ids)]" : "]");
}

// --- seeded randomness (splitmix64: the same stream on every platform) -------------------------------

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
  bool one_in(size_t n) { return below(n) == 0; }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }

 private:
  uint64_t state_;
};

// --- UTF-8, independently of the kernels (Unicode Table 3-7, well-formed byte sequences) ---------------

// Offset of the first ill-formed sequence, or s.size().
size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b == 0xE0) len = 3, lo = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) len = 3;
    else if (b == 0xED) len = 3, hi = 0x9F;
    else if (b == 0xF0) len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) len = 4;
    else if (b == 0xF4) len = 4, hi = 0x8F;
    else return i;
    if (i + 1 >= n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (i + k >= n || (p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return n;
}

std::string utf8(char32_t cp) {  // cp must be a scalar value
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | cp >> 6), out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | cp >> 12), out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | cp >> 18), out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (cp >> 6 & 0x3F)), out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// Ill-formed sequences: truncated, overlong, surrogates (CESU-8 pair included), beyond U+10FFFF,
// never-used bytes, stray continuation bytes.
const std::vector<std::string> kBroken = {
    "\xC3", "\xE2\x82", "\xF0\x9F\x98", "\xF4\x8F\xBF", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF",
    "\xF0\x80\x80\x80", "\xF0\x8F\xBF\xBF", "\xED\xA0\x80", "\xED\xBF\xBF", "\xED\xA0\xBD\xED\xB8\x80",
    "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xF7\xBF\xBF\xBF", "\xF8\x88\x80\x80\x80", "\xFC\x84\x80\x80\x80\x80",
    "\xFE", "\xFF", "\x80", "\xBF", "\xC3\x28", "\xE2\x28\xA1", "\xF0\x28\x8C\xBC", "\xE2\x82\xAC\xAC",
};

// --- table and vector files -------------------------------------------------------------------------

class ItemReader {
 public:
  explicit ItemReader(const std::string& path) : path_(path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open");
    data_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  ItemReader(std::string name, std::string data) : path_(std::move(name)), data_(std::move(data)) {}

  void magic(const char* expected) {
    need(8, "magic");
    if (data_.compare(0, 8, expected) != 0) fail(std::string("not a ") + expected + " file");
    pos_ = 8;
  }
  std::vector<int64_t> ints(const char* what) {
    const uint64_t count = header('I', what);
    if (count > (data_.size() - pos_) / 8)
      fail(std::string(what) + ": " + std::to_string(count) + " ints do not fit in the file");
    std::vector<int64_t> values(count);
    if (count) std::memcpy(values.data(), data_.data() + pos_, count * 8);
    pos_ += count * 8;
    return values;
  }
  std::vector<std::string> strings(const char* what) {
    const uint64_t count = header('S', what);
    if (count > (data_.size() - pos_) / 8)
      fail(std::string(what) + ": " + std::to_string(count) + " strings do not fit in the file");
    std::vector<std::string> values;
    values.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t length = u64(what);
      need(length, what);
      values.emplace_back(data_, pos_, length);
      pos_ += length;
    }
    return values;
  }
  void end() {
    if (pos_ != data_.size()) fail(std::to_string(data_.size() - pos_) + " bytes after the last item");
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const { throw std::runtime_error(path_ + ": " + problem); }
  void need(uint64_t bytes, const char* what) const {
    if (bytes > data_.size() - pos_) fail(std::string(what) + ": the file is cut short");
  }
  uint64_t u64(const char* what) {
    need(8, what);
    uint64_t v;
    std::memcpy(&v, data_.data() + pos_, 8);
    pos_ += 8;
    return v;
  }
  uint64_t header(char tag, const char* what) {
    need(1, what);
    if (data_[pos_] != tag) fail(std::string(what) + ": expected an item of kind " + tag);
    ++pos_;
    return u64(what);
  }
  std::string path_;
  std::string data_;
  size_t pos_ = 0;
};

// Flattened entries of `width` ints (as the op's attributes hold them) -> rows; a length that is not
// a multiple of width is a truncated table.
template <class Row>
std::vector<Row> rows_of(const std::vector<int64_t>& flat, size_t width, const char* table,
                         Row (*make)(const int64_t*)) {
  if (flat.size() % width != 0)
    throw std::runtime_error(std::string(table) + ": " + std::to_string(flat.size()) + " ints, not a multiple of " +
                             std::to_string(width));
  std::vector<Row> rows;
  for (size_t k = 0; k < flat.size(); k += width) rows.push_back(make(&flat[k]));
  return rows;
}

NfcTables nfc_tables_of(const std::vector<int64_t>& classes, const std::vector<int64_t>& decompositions,
                        const std::vector<int64_t>& compositions) {
  using namespace bitnet_onnx::text;
  NfcTables t;
  t.combining_classes = rows_of<CombiningClass>(classes, 2, "combining_classes",
                                                [](const int64_t* v) { return CombiningClass{v[0], v[1]}; });
  t.decompositions = rows_of<Decomposition>(decompositions, 3, "decompositions",
                                            [](const int64_t* v) { return Decomposition{v[0], v[1], v[2]}; });
  t.compositions = rows_of<Composition>(compositions, 3, "compositions",
                                        [](const int64_t* v) { return Composition{v[0], v[1], v[2]}; });
  return t;
}

NfcTables load_nfc_tables(ItemReader r) {
  r.magic("TXTNFT01");
  auto classes = r.ints("combining_classes");
  auto decompositions = r.ints("decompositions");
  auto compositions = r.ints("compositions");
  r.end();
  return nfc_tables_of(classes, decompositions, compositions);
}

BpeTables load_bpe_tables(ItemReader r) {
  BpeTables t;
  r.magic("TXTBPT01");
  t.vocab = r.strings("vocab");
  t.vocab_ids = r.ints("vocab_ids");
  t.merges = r.ints("merges");
  t.added_tokens = r.strings("added_tokens");
  t.added_token_ids = r.ints("added_token_ids");
  const auto options = r.ints("unk_id, fuse_unk, byte_fallback");
  const auto space = r.strings("space_replacement");
  r.end();
  if (options.size() != 3 || space.size() != 1) throw std::runtime_error("bpe tables: bad option items");
  t.unk_id = options[0], t.fuse_unk = options[1] != 0, t.byte_fallback = options[2] != 0;
  t.space_replacement = space[0];
  return t;
}

struct Vectors {
  std::vector<std::string> inputs;
  std::vector<int64_t> status;                // kValid, or the offset of the first invalid sequence
  std::vector<std::string> nfc;               // NFC vectors: expected outputs
  std::vector<std::vector<int64_t>> ids;      // BPE vectors: expected ids
};

Vectors load_vectors(ItemReader r, bool bpe) {
  Vectors v;
  r.magic(bpe ? "TXTBPV01" : "TXTNFV01");
  v.inputs = r.strings("inputs");
  v.status = r.ints("status");
  if (bpe) {
    const auto counts = r.ints("id_counts");
    const auto ids = r.ints("ids");
    if (counts.size() != v.inputs.size()) throw std::runtime_error("bpe vectors: id_counts does not match inputs");
    size_t at = 0;
    for (int64_t c : counts) {
      if (c < 0 || static_cast<uint64_t>(c) > ids.size() - at) throw std::runtime_error("bpe vectors: ids cut short");
      v.ids.emplace_back(ids.begin() + at, ids.begin() + at + c);
      at += c;
    }
    if (at != ids.size()) throw std::runtime_error("bpe vectors: ids left over");
  } else {
    v.nfc = r.strings("expected");
    if (v.nfc.size() != v.inputs.size()) throw std::runtime_error("nfc vectors: expected does not match inputs");
  }
  r.end();
  if (v.status.size() != v.inputs.size()) throw std::runtime_error("vectors: status does not match inputs");
  return v;
}

// --- running one text, with the checks that hold for any input ---------------------------------------

// A copy of a text in a heap block of exactly its size: ASan then sees a read one byte past its end
// (a std::string has its terminator and often spare capacity there).
class ExactText {
 public:
  explicit ExactText(std::string_view s) : bytes_(new char[s.size()]), size_(s.size()) {
    if (size_) std::memcpy(bytes_.get(), s.data(), size_);
  }
  std::string_view view() const { return {bytes_.get(), size_}; }

 private:
  std::unique_ptr<char[]> bytes_;
  size_t size_;
};

bool normalize_exact(const NfcNormalizer& nfc, std::string_view text, std::string* out, Utf8Error* error) {
  NfcScratch scratch;
  return nfc.normalize(ExactText(text).view(), out, error, &scratch);
}

BpeResult encode_exact(const ByteFallbackBpe& bpe, std::string_view text, size_t max_tokens) {
  return bpe.encode(ExactText(text).view(), max_tokens);
}

// NFC of text: an error exactly at the first invalid sequence, else valid UTF-8 (and, for the real
// Unicode tables, its own NFC). Returns the output ("" on error).
std::string run_nfc(const NfcNormalizer& nfc, std::string_view text, const std::string& what, bool idempotent) {
  std::string out;
  Utf8Error error;
  const bool ok = normalize_exact(nfc, text, &out, &error);
  const size_t bad = first_invalid_utf8(text);
  if (!check(ok == (bad == text.size()), what, (ok ? "normalized invalid UTF-8 " : "refused valid UTF-8 ") + shown(text)))
    return "";
  if (!ok) {
    check(error.byte_offset == bad, what, "error at byte " + std::to_string(error.byte_offset) + ", expected " +
                                              std::to_string(bad) + " (" + error.problem + ") in " + shown(text));
    return "";
  }
  check(first_invalid_utf8(out) == out.size(), what, "output is not valid UTF-8 for " + shown(text));
  if (idempotent) {
    std::string again;
    check(normalize_exact(nfc, out, &again, &error) && again == out, what, "NFC(NFC(x)) != NFC(x) for " + shown(text));
  }
  return out;
}

bool error_at(const BpeResult& r, size_t offset) {
  const std::string suffix = " at byte " + std::to_string(offset);
  return r.error.size() >= suffix.size() && r.error.compare(r.error.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// BPE of text: an error exactly at the first invalid sequence, else only ids of the tables, and
// max_tokens = k giving the first k ids (texts under 4 KB).
BpeResult run_bpe(const ByteFallbackBpe& bpe, std::string_view text, const std::vector<int64_t>& sorted_ids,
                  const std::string& what, Rng* rng) {
  BpeResult r = encode_exact(bpe, text, 0);
  const size_t bad = first_invalid_utf8(text);
  if (!check(r.ok() == (bad == text.size()), what,
             (r.ok() ? "tokenized invalid UTF-8 " : "refused valid UTF-8 (" + r.error + ") ") + shown(text)))
    return r;
  if (!r.ok()) {
    check(error_at(r, bad), what,
          "error '" + r.error + "', expected at byte " + std::to_string(bad) + " in " + shown(text));
    return r;
  }
  const bool known = std::all_of(r.ids.begin(), r.ids.end(), [&](int64_t id) {
    return std::binary_search(sorted_ids.begin(), sorted_ids.end(), id);
  });
  check(known, what, "an id outside the tables for " + shown(text) + ": " + ids_str(r.ids));
  if (!r.ids.empty() && text.size() < 4096) {
    const size_t k = 1 + rng->below(r.ids.size());
    const BpeResult capped = encode_exact(bpe, text, k);
    check(capped.ok() && capped.ids == std::vector<int64_t>(r.ids.begin(), r.ids.begin() + k), what,
          "max_tokens " + std::to_string(k) + " is not the prefix for " + shown(text));
  }
  return r;
}

// Every id the tables can produce (vocab and added tokens), sorted.
std::vector<int64_t> ids_of(const BpeTables& t) {
  std::vector<int64_t> ids = t.vocab_ids;
  if (ids.empty())
    for (size_t i = 0; i < t.vocab.size(); ++i) ids.push_back(static_cast<int64_t>(i));
  ids.insert(ids.end(), t.added_token_ids.begin(), t.added_token_ids.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}

// --- reference vectors ----------------------------------------------------------------------------------

void check_nfc_vectors(const NfcNormalizer& nfc, const Vectors& v, const std::string& name) {
  const int before = g_failed;
  for (size_t i = 0; i < v.inputs.size(); ++i) {
    const std::string what = name + " vector " + std::to_string(i);
    std::string out;
    Utf8Error error;
    const bool ok = normalize_exact(nfc, v.inputs[i], &out, &error);
    if (v.status[i] == kValid)
      check(ok && out == v.nfc[i], what,
            shown(v.inputs[i]) + " -> " + (ok ? shown(out) : std::string("error ") + error.problem) + ", expected " +
                shown(v.nfc[i]));
    else
      check(!ok && static_cast<int64_t>(error.byte_offset) == v.status[i], what,
            shown(v.inputs[i]) + ": expected the error at byte " + std::to_string(v.status[i]) +
                (ok ? ", got " + shown(out) : ", got it at " + std::to_string(error.byte_offset)));
  }
  std::printf("%s vectors: %s (%zu cases)\n", name.c_str(), g_failed == before ? "ok" : "FAILED", v.inputs.size());
}

void check_bpe_vectors(const ByteFallbackBpe& bpe, const Vectors& v, const std::string& name) {
  const int before = g_failed;
  for (size_t i = 0; i < v.inputs.size(); ++i) {
    const std::string what = name + " vector " + std::to_string(i);
    const BpeResult r = encode_exact(bpe, v.inputs[i], 0);
    if (v.status[i] != kValid) {
      check(!r.ok() && error_at(r, static_cast<size_t>(v.status[i])), what,
            shown(v.inputs[i]) + ": expected the error at byte " + std::to_string(v.status[i]) + ", got " +
                (r.ok() ? ids_str(r.ids) : "'" + r.error + "'"));
      continue;
    }
    if (!check(r.ok() && r.ids == v.ids[i], what, shown(v.inputs[i]) + " -> " + (r.ok() ? ids_str(r.ids) : r.error) +
                                                      ", expected " + ids_str(v.ids[i])))
      continue;
    if (v.ids[i].size() > 1) {  // a cap inside the text: the reference's prefix
      const size_t k = v.ids[i].size() / 2;
      check(encode_exact(bpe, v.inputs[i], k).ids == std::vector<int64_t>(v.ids[i].begin(), v.ids[i].begin() + k), what,
            "max_tokens " + std::to_string(k) + " is not the reference's prefix for " + shown(v.inputs[i]));
    }
  }
  std::printf("%s vectors: %s (%zu cases)\n", name.c_str(), g_failed == before ? "ok" : "FAILED", v.inputs.size());
}

// --- hostile texts ------------------------------------------------------------------------------------------

struct Pools {
  std::vector<std::string> valid;    // single characters of every kind the kernels treat differently
  std::vector<std::string> marks;    // combining marks (class != 0)
  std::vector<std::string> tokens;   // whole and cut added tokens, vocab strings, byte-token names
  std::vector<char32_t> code_points; // the code points of valid and marks
};

void add_valid(char32_t cp, Pools* p) {
  p->valid.push_back(utf8(cp));
  p->code_points.push_back(cp);
}

void add_mark(char32_t cp, Pools* p) {
  p->marks.push_back(utf8(cp));
  p->code_points.push_back(cp);
}

void add_code_points(const NfcTables& t, Pools* p) {
  for (const auto& c : t.combining_classes) add_mark(static_cast<char32_t>(c.code_point), p);
  for (const auto& d : t.decompositions) add_valid(static_cast<char32_t>(d.code_point), p);
  for (const auto& c : t.compositions) add_valid(static_cast<char32_t>(c.first), p);
  p->valid.insert(p->valid.end(), p->marks.begin(), p->marks.end());
}

Pools base_pools() {
  Pools p;
  for (char c : std::string("abcdeAZ09 .,<>\t\n\r")) add_valid(static_cast<char32_t>(c), &p);
  p.valid.emplace_back(1, '\0');
  for (char32_t cp : {0xE9u, 0x301u, 0x316u, 0x2581u, 0x6771u, 0xAC00u, 0xD7A3u, 0x1100u, 0x1161u, 0x11A8u, 0xFEFFu,
                      0x200Du, 0xFFFDu, 0xFFFFu, 0x10000u, 0x1F642u, 0x1D15Eu, 0x10FFFFu, 0xE000u})
    add_valid(cp, &p);
  for (char32_t cp : {0x300u, 0x301u, 0x316u, 0x323u, 0x327u, 0x334u, 0x345u, 0x5B0u, 0x93Cu, 0x3099u}) add_mark(cp, &p);
  p.tokens = {"<0x41>", "<0xE2>", "<0x", "<unk>", "\xE2\x96\x81", " "};
  return p;
}

void add_tokens(const BpeTables& t, Rng* rng, Pools* p) {
  for (const auto& token : t.added_tokens) {
    p->tokens.push_back(token);
    p->tokens.push_back(token.substr(0, 1 + rng->below(token.size())));  // may cut a character
  }
  for (int k = 0; k < 200 && !t.vocab.empty(); ++k) p->tokens.push_back(rng->pick(t.vocab));
}

std::string random_bytes(Rng* rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng->next());
  return s;
}

std::string piece(Rng* rng, const Pools& p, bool broken) {
  if (broken && rng->one_in(6)) return rng->pick(kBroken);
  if (!p.tokens.empty() && rng->one_in(4)) return rng->pick(p.tokens);
  if (rng->one_in(5)) return rng->pick(p.marks);
  if (rng->one_in(6)) {  // any scalar value
    char32_t cp;
    do cp = static_cast<char32_t>(rng->below(0x110000));
    while (cp >= 0xD800 && cp <= 0xDFFF);
    return utf8(cp);
  }
  return rng->pick(p.valid);
}

std::string mixed(Rng* rng, const Pools& p, size_t pieces, bool broken) {
  std::string s;
  for (size_t k = 0; k < pieces; ++k) s += piece(rng, p, broken);
  return s;
}

std::string repeated(const std::string& unit, size_t bytes) {
  std::string s;
  if (unit.empty()) return s;
  s.reserve(bytes + unit.size());
  while (s.size() < bytes) s += unit;
  return s;
}

// One hostile text of a random kind.
std::string hostile(Rng* rng, const Pools& p) {
  switch (rng->below(9)) {
    case 0: return "";
    case 1: return random_bytes(rng, rng->below(64));
    case 2: return mixed(rng, p, 1 + rng->below(40), true);
    case 3: return mixed(rng, p, 1 + rng->below(40), false);
    case 4: {  // a valid text cut anywhere, possibly inside a character
      std::string s = mixed(rng, p, 1 + rng->below(20), false);
      return s.substr(0, rng->below(s.size() + 1));
    }
    case 5: {  // a base and a run of marks (one class or many: the long-run ordering path)
      std::string s = rng->pick(p.valid);
      const size_t n = rng->one_in(8) ? 33 + rng->below(3000) : 1 + rng->below(40);
      const std::string one = rng->pick(p.marks);
      for (size_t k = 0; k < n; ++k) s += rng->one_in(2) ? one : rng->pick(p.marks);
      return s;
    }
    case 6: return repeated(piece(rng, p, true), 1 + rng->below(rng->one_in(8) ? 20000 : 200));
    case 7: {  // added tokens and their prefixes back to back
      std::string s;
      for (size_t k = 1 + rng->below(30); k > 0 && !p.tokens.empty(); --k) s += rng->pick(p.tokens);
      return s;
    }
    default: {  // valid text with one broken sequence somewhere
      std::string s = mixed(rng, p, 1 + rng->below(20), false);
      s.insert(rng->below(s.size() + 1), rng->pick(kBroken));
      return s;
    }
  }
}

// 1 MB texts: one character, spaces, combining marks, jamo, random valid, random bytes, an error at
// the very end, added-token prefixes.
std::vector<std::string> megabyte_texts(Rng* rng, const Pools& p) {
  std::vector<std::string> texts = {
      repeated("a", kMegabyte), repeated(" ", kMegabyte), "e" + repeated("\xCC\x81", kMegabyte),
      "a" + repeated("\xCC\x81\xCC\x96\xCC\xA3\xCD\x85", kMegabyte),  // classes 230, 220, 220, 240
      repeated("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", kMegabyte),     // L V T jamo
      repeated("\xE6\x9D\xB1", kMegabyte), random_bytes(rng, kMegabyte), repeated("ab ", kMegabyte) + "\xC3",
  };
  std::string valid;
  while (valid.size() < kMegabyte) valid += piece(rng, p, false);
  texts.push_back(std::move(valid));
  std::string longest;  // the longest token of the pool, its last byte cut: every position a near match
  for (const auto& t : p.tokens) if (t.size() > longest.size()) longest = t;
  if (longest.size() > 1) texts.push_back(repeated(longest.substr(0, longest.size() - 1), kMegabyte));
  return texts;
}

struct StressCount {
  size_t texts = 0, megabyte = 0;
};

void stress_nfc(const NfcNormalizer& nfc, const Pools& p, uint64_t seed, size_t rounds, const std::string& name) {
  Rng rng(seed);
  const int before = g_failed;
  const std::string what = name + " stress";
  for (size_t i = 0; i < rounds; ++i) run_nfc(nfc, hostile(&rng, p), what, true);
  const auto big = megabyte_texts(&rng, p);
  for (const auto& text : big) run_nfc(nfc, text, what + " (1 MB)", true);
  std::printf("%s stress: %s (seed %" PRIu64 ", %zu texts + %zu of 1 MB)\n", name.c_str(),
              g_failed == before ? "ok" : "FAILED", seed, rounds, big.size());
}

void stress_bpe(const ByteFallbackBpe& bpe, const BpeTables& t, const Pools& p, uint64_t seed, size_t rounds,
                const std::string& name) {
  Rng rng(seed);
  const int before = g_failed;
  const auto ids = ids_of(t);
  const std::string what = name + " stress";
  for (size_t i = 0; i < rounds; ++i) run_bpe(bpe, hostile(&rng, p), ids, what, &rng);
  const auto big = megabyte_texts(&rng, p);
  for (const auto& text : big) run_bpe(bpe, text, ids, what + " (1 MB)", &rng);
  std::printf("%s stress: %s (seed %" PRIu64 ", %zu texts + %zu of 1 MB)\n", name.c_str(),
              g_failed == before ? "ok" : "FAILED", seed, rounds, big.size());
}

// --- malformed NFC tables ------------------------------------------------------------------------------------

using NfcEdit = std::function<void(NfcTables*)>;

// build() of the edited tables refuses them, naming `table` (and `entry` when >= 0).
void expect_nfc_refused(const NfcTables& base, const std::string& what, const char* table, int64_t entry,
                        const NfcEdit& edit) {
  NfcTables t = base;
  edit(&t);
  NfcTableError error;
  const auto nfc = NfcNormalizer::build(t, &error);
  if (!check(!nfc, "nfc malformed: " + what, "accepted")) return;
  check(std::string(error.table) == table && (entry < 0 || error.entry == static_cast<size_t>(entry)) &&
            !error.problem.empty(),
        "nfc malformed: " + what,
        std::string("refused as ") + error.table + "[" + std::to_string(error.entry) + "]: " + error.problem +
            ", expected " + table + (entry >= 0 ? "[" + std::to_string(entry) + "]" : ""));
}

void check_nfc_malformed(const NfcTables& real) {
  using namespace bitnet_onnx::text;
  const int before = g_failed;
  const int64_t nc = static_cast<int64_t>(real.combining_classes.size());
  const int64_t nd = static_cast<int64_t>(real.decompositions.size());
  const int64_t np = static_cast<int64_t>(real.compositions.size());
  auto add_class = [](int64_t cp, int64_t ccc) { return [=](NfcTables* t) { t->combining_classes.push_back({cp, ccc}); }; };
  auto add_decomposition = [](std::vector<Decomposition> rows) {
    return [=](NfcTables* t) { t->decompositions.insert(t->decompositions.end(), rows.begin(), rows.end()); };
  };
  auto add_composition = [](int64_t a, int64_t b, int64_t c) {
    return [=](NfcTables* t) { t->compositions.push_back({a, b, c}); };
  };

  for (int64_t cp : {int64_t{-1}, int64_t{0x110000}, int64_t{0xD800}, int64_t{0xDFFF}, kI64Min, kI64Max})
    expect_nfc_refused(real, "class of code point " + std::to_string(cp), "combining_classes", nc, add_class(cp, 5));
  for (int64_t ccc : {int64_t{-1}, int64_t{255}, kI64Max, kI64Min})
    expect_nfc_refused(real, "class " + std::to_string(ccc), "combining_classes", nc, add_class(0xE000, ccc));
  expect_nfc_refused(real, "a class listed twice", "combining_classes", nc,
                     add_class(real.combining_classes[0].code_point, real.combining_classes[0].combining_class));

  expect_nfc_refused(real, "decomposition of -1", "decompositions", nd, add_decomposition({{-1, 0x41, kNoSecond}}));
  expect_nfc_refused(real, "decomposition to U+110000", "decompositions", nd,
                     add_decomposition({{0xE000, 0x110000, kNoSecond}}));
  expect_nfc_refused(real, "decomposition to a surrogate", "decompositions", nd,
                     add_decomposition({{0xE000, 0x41, 0xDFFF}}));
  expect_nfc_refused(real, "second -2", "decompositions", nd, add_decomposition({{0xE000, 0x41, -2}}));
  expect_nfc_refused(real, "second INT64_MIN", "decompositions", nd, add_decomposition({{0xE000, 0x41, kI64Min}}));
  expect_nfc_refused(real, "a Hangul syllable listed", "decompositions", nd, add_decomposition({{0xAC00, 0x1100, 0x1161}}));
  expect_nfc_refused(real, "a decomposition listed twice", "decompositions", nd,
                     add_decomposition({real.decompositions[0]}));
  // Cycles: a code point to itself, two to each other, through the second code point, and
  // chains past the depth and length bounds.
  expect_nfc_refused(real, "cycle of one", "decompositions", nd, add_decomposition({{0xE000, 0xE000, kNoSecond}}));
  expect_nfc_refused(real, "cycle of two", "decompositions", -1,
                     add_decomposition({{0xE000, 0xE001, kNoSecond}, {0xE001, 0xE000, kNoSecond}}));
  expect_nfc_refused(real, "cycle through second", "decompositions", -1,
                     add_decomposition({{0xE000, 0x41, 0xE001}, {0xE001, 0x301, 0xE000}}));
  expect_nfc_refused(real, "cycle through a real code point", "decompositions", -1,
                     add_decomposition({{0x41, 0xC0, kNoSecond}}));  // À -> A + grave, A -> À
  std::vector<Decomposition> chain, tree;
  for (int64_t k = 0; k < 40; ++k) chain.push_back({0xE000 + k, 0xE001 + k, kNoSecond});
  for (int64_t k = 0; k < 6; ++k) tree.push_back({0xE100 + k, 0xE101 + k, 0xE101 + k});  // 2^6 code points
  expect_nfc_refused(real, "a chain of 40", "decompositions", -1, add_decomposition(chain));
  expect_nfc_refused(real, "a decomposition of 64 code points", "decompositions", nd, add_decomposition(tree));

  expect_nfc_refused(real, "composition to a code point without decomposition", "compositions", np,
                     add_composition(0x41, 0x301, 0xE000));
  expect_nfc_refused(real, "composition that disagrees with the decomposition", "compositions", np,
                     add_composition(0x41, 0x301, 0xC0));
  expect_nfc_refused(real, "composition of -1", "compositions", np, add_composition(-1, 0x301, 0xC0));
  expect_nfc_refused(real, "composition to U+110000", "compositions", np, add_composition(0x41, 0x300, 0x110000));
  expect_nfc_refused(real, "a Hangul composition listed", "compositions", np, add_composition(0x1100, 0x1161, 0xAC00));
  expect_nfc_refused(real, "a pair listed twice", "compositions", np,
                     [&](NfcTables* t) { t->compositions.push_back(real.compositions[0]); });
  // Truncated tables: decompositions cut short leave compositions without their decomposition.
  expect_nfc_refused(real, "decompositions cut to half", "compositions", -1,
                     [&](NfcTables* t) { t->decompositions.resize(nd / 2); });
  expect_nfc_refused(real, "decompositions empty", "compositions", 0, [](NfcTables* t) { t->decompositions.clear(); });

  // Flattened arrays whose length is not a multiple of the entry width are refused before build()
  // (as the op's attribute reader does).
  for (int table = 0; table < 3; ++table) {
    std::vector<int64_t> flat[3] = {{0x301, 230}, {0xC0, 0x41, 0x300}, {0x41, 0x300, 0xC0}};
    flat[table].pop_back();
    bool refused = false;
    try {
      nfc_tables_of(flat[0], flat[1], flat[2]);
    } catch (const std::runtime_error&) {
      refused = true;
    }
    check(refused, "nfc malformed: truncated flat table " + std::to_string(table), "accepted");
  }

  // Tables that are fine: none at all (only Hangul is left) and a minimal one.
  NfcTableError error;
  const auto empty = NfcNormalizer::build(NfcTables{}, &error);
  if (check(empty != nullptr, "nfc empty tables", error.problem)) {
    check(run_nfc(*empty, "e\xCC\x81", "nfc empty tables", false) == "e\xCC\x81", "nfc empty tables", "e + acute changed");
    check(run_nfc(*empty, "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "nfc empty tables", false) == "\xEA\xB0\x81",
          "nfc empty tables", "L V T jamo are not composed to U+AC01");
  }
  std::printf("nfc malformed tables: %s\n", g_failed == before ? "ok" : "FAILED");
}

// --- malformed BPE tables -------------------------------------------------------------------------------------

using BpeEdit = std::function<void(BpeTables*)>;

void expect_bpe_refused(const BpeTables& base, const std::string& what, const char* attribute, const BpeEdit& edit) {
  BpeTables t = base;
  edit(&t);
  BpeTableError error;
  const auto bpe = ByteFallbackBpe::build(t, &error);
  if (!check(!bpe, "bpe malformed: " + what, "accepted")) return;
  check(std::string(error.attribute) == attribute && !error.problem.empty(), "bpe malformed: " + what,
        std::string("refused as '") + error.attribute + "': " + error.problem + ", expected '" + attribute + "'");
}

int64_t id_of(const BpeTables& t, const std::string& token) {
  const auto it = std::find(t.vocab.begin(), t.vocab.end(), token);
  if (it == t.vocab.end()) return -1;
  const size_t i = static_cast<size_t>(it - t.vocab.begin());
  return t.vocab_ids.empty() ? static_cast<int64_t>(i) : t.vocab_ids[i];
}

void check_bpe_malformed(const BpeTables& base, const std::string& name) {
  const int before = g_failed;
  const int64_t n = static_cast<int64_t>(base.vocab.size());
  auto explicit_ids = [n](BpeTables* t) {
    if (t->vocab_ids.empty())
      for (int64_t i = 0; i < n; ++i) t->vocab_ids.push_back(i);
  };
  expect_bpe_refused(base, "vocab_ids cut short", "vocab_ids", [&](BpeTables* t) {
    explicit_ids(t);
    t->vocab_ids.pop_back();
  });
  for (int64_t id : {int64_t{-1}, kI32Max, kI64Max, kI64Min})
    expect_bpe_refused(base, "vocab id " + std::to_string(id), "vocab_ids", [&](BpeTables* t) {
      explicit_ids(t);
      t->vocab_ids[1] = id;
    });
  expect_bpe_refused(base, "a vocab id twice", "vocab_ids", [&](BpeTables* t) {
    explicit_ids(t);
    t->vocab_ids[1] = t->vocab_ids[0];
  });
  expect_bpe_refused(base, "a vocab token twice", "vocab", [&](BpeTables* t) {
    explicit_ids(t);
    t->vocab.push_back(t->vocab[5]);
    t->vocab_ids.push_back(n + 1000);
  });

  expect_bpe_refused(base, "merges cut to an odd length", "merges", [](BpeTables* t) {
    if (t->merges.empty()) t->merges = {0, 0};
    t->merges.pop_back();
  });
  for (int64_t id : {int64_t{-1}, kI32Max, kI64Max, kI64Min, n + 100})
    expect_bpe_refused(base, "merge id " + std::to_string(id), "merges",
                       [&](BpeTables* t) { t->merges.insert(t->merges.begin(), {id, 0}); });
  expect_bpe_refused(base, "a merge whose concatenation is not in the vocab", "merges", [&](BpeTables* t) {
    t->merges.insert(t->merges.end(), {id_of(*t, "<pad>"), id_of(*t, "<eos>")});
  });

  expect_bpe_refused(base, "added_token_ids cut short", "added_token_ids", [](BpeTables* t) {
    t->added_tokens.push_back("<extra>");  // one more token than ids
  });
  for (int64_t id : {int64_t{-1}, kI32Max, kI64Min})
    expect_bpe_refused(base, "added id " + std::to_string(id), "added_token_ids", [&](BpeTables* t) {
      t->added_tokens.push_back("<extra>");
      t->added_token_ids.push_back(id);
    });
  expect_bpe_refused(base, "an empty added token", "added_tokens", [](BpeTables* t) {
    t->added_tokens.push_back("");
    t->added_token_ids.push_back(0);
  });
  for (size_t k = 0; k < kBroken.size(); ++k)
    expect_bpe_refused(base, "added token of broken UTF-8 " + shown(kBroken[k]), "added_tokens", [&](BpeTables* t) {
      t->added_tokens.push_back("<" + kBroken[k] + ">");
      t->added_token_ids.push_back(0);
    });
  expect_bpe_refused(base, "an added token twice", "added_tokens", [](BpeTables* t) {
    t->added_tokens.insert(t->added_tokens.end(), {"<dup>", "<dup>"});
    t->added_token_ids.insert(t->added_token_ids.end(), {7, 8});
  });
  for (int64_t id : {int64_t{-2}, kI32Max, kI64Max, kI64Min, n + 100})
    expect_bpe_refused(base, "unk_id " + std::to_string(id), "unk_id", [&](BpeTables* t) { t->unk_id = id; });

  // Accepted corner tables: merges that cannot shrink a word (the empty token) and an empty vocab.
  BpeTables odd;
  odd.vocab = {"a", "b", "ab", "", "<0x61>"};
  odd.merges = {0, 3, 3, 0, 0, 1, 3, 3};  // a+"" = a, ""+a = a, a+b = ab, ""+"" = ""
  odd.byte_fallback = true;
  BpeTableError error;
  auto bpe = ByteFallbackBpe::build(odd, &error);
  Rng rng(1);
  if (check(bpe != nullptr, "bpe empty-token merges", error.problem)) {
    const auto ids = ids_of(odd);
    check(run_bpe(*bpe, "aab", ids, "bpe empty-token merges", &rng).ids == std::vector<int64_t>{0, 2},
          "bpe empty-token merges", "aab is not [a, ab]");
    check(run_bpe(*bpe, "xa", ids, "bpe empty-token merges", &rng).ids == std::vector<int64_t>{0},
          "bpe empty-token merges", "x (no token, no byte token) is not dropped");
  }
  bpe = ByteFallbackBpe::build(BpeTables{}, &error);
  if (check(bpe != nullptr, "bpe empty vocab", error.problem))
    check(run_bpe(*bpe, "any text \xE6\x9D\xB1", {}, "bpe empty vocab", &rng).ids.empty(), "bpe empty vocab",
          "ids from an empty vocab");
  std::printf("%s malformed tables: %s\n", name.c_str(), g_failed == before ? "ok" : "FAILED");
}

// --- random mutations of the tables --------------------------------------------------------------------------

int64_t edge_value(Rng* rng, int64_t typical) {
  static const int64_t kEdges[] = {-1, 0, 0x41, 0x300, 0x301, 0xC0, 0x10FFFF, 0x110000, 0xD800, 0xAC00, 0x1100,
                                   0x1161, 0x11A8, 255, 254, kI32Max, kI64Min, kI64Max};
  if (rng->one_in(3)) return typical;
  return kEdges[rng->below(sizeof kEdges / sizeof kEdges[0])];
}

void mutate_nfc(NfcTables* t, Rng* rng, const Pools& p) {
  using namespace bitnet_onnx::text;
  switch (rng->below(8)) {
    case 0: {  // one field of one entry to an edge value or a neighbour's value
      const size_t table = rng->below(3);
      if (table == 0 && !t->combining_classes.empty()) {
        auto& e = t->combining_classes[rng->below(t->combining_classes.size())];
        (rng->one_in(2) ? e.code_point : e.combining_class) = edge_value(rng, rng->pick(t->combining_classes).code_point);
      } else if (table == 1 && !t->decompositions.empty()) {
        auto& e = t->decompositions[rng->below(t->decompositions.size())];
        int64_t* fields[] = {&e.code_point, &e.first, &e.second};
        *fields[rng->below(3)] = edge_value(rng, rng->pick(t->decompositions).code_point);
      } else if (!t->compositions.empty()) {
        auto& e = t->compositions[rng->below(t->compositions.size())];
        int64_t* fields[] = {&e.first, &e.second, &e.composite};
        *fields[rng->below(3)] = edge_value(rng, rng->pick(t->compositions).composite);
      }
      break;
    }
    case 1:  // drop an entry (a decomposition whose composition stays is refused)
      if (!t->decompositions.empty())
        t->decompositions.erase(t->decompositions.begin() + rng->below(t->decompositions.size()));
      if (!t->compositions.empty() && rng->one_in(2))
        t->compositions.erase(t->compositions.begin() + rng->below(t->compositions.size()));
      break;
    case 2:  // ASCII with a combining class: the ASCII fast path is off
      t->combining_classes.push_back(
          {static_cast<int64_t>(0x20 + rng->below(0x5F)), static_cast<int64_t>(1 + rng->below(254))});
      break;
    case 3:  // a composite with a nonzero class
      if (!t->compositions.empty())
        t->combining_classes.push_back({rng->pick(t->compositions).composite, static_cast<int64_t>(1 + rng->below(254))});
      break;
    case 4: {  // a new pair composing to a new code point, from any characters (marks, ASCII, Hangul)
      const int64_t composite = 0xF0000 + static_cast<int64_t>(rng->below(0x1000));
      const int64_t first = rng->pick(p.code_points), second = rng->pick(p.code_points);
      t->decompositions.push_back({composite, first, second});
      t->compositions.push_back({first, second, composite});
      break;
    }
    case 5:  // a deep (but finite) singleton chain
      for (int64_t k = 0, depth = static_cast<int64_t>(rng->below(40)); k < depth; ++k)
        t->decompositions.push_back({0xE000 + k, 0xE001 + k, kNoSecond});
      break;
    case 6:  // a duplicate entry
      if (!t->combining_classes.empty()) t->combining_classes.push_back(rng->pick(t->combining_classes));
      break;
    default:  // swap two decompositions' mappings
      if (t->decompositions.size() > 1) {
        auto& a = t->decompositions[rng->below(t->decompositions.size())];
        auto& b = t->decompositions[rng->below(t->decompositions.size())];
        std::swap(a.first, b.first);
        std::swap(a.second, b.second);
      }
  }
}

// Remaps every id in [0, 2^31) through 3 * id + 5 (holes in the ids) consistently; ids a mutation
// put out of range stay as they are.
void spread_ids(BpeTables* t) {
  if (t->vocab_ids.empty())
    for (size_t i = 0; i < t->vocab.size(); ++i) t->vocab_ids.push_back(static_cast<int64_t>(i));
  auto spread = [](int64_t& id) {
    if (id >= 0 && id <= kI32Max) id = 3 * id + 5;
  };
  std::for_each(t->vocab_ids.begin(), t->vocab_ids.end(), spread);
  std::for_each(t->merges.begin(), t->merges.end(), spread);
  std::for_each(t->added_token_ids.begin(), t->added_token_ids.end(), spread);
  if (t->unk_id >= 0) spread(t->unk_id);
}

void mutate_bpe(BpeTables* t, Rng* rng) {
  const int64_t n = static_cast<int64_t>(t->vocab.size());
  switch (rng->below(9)) {
    case 0:  // a merge id to another id or an edge value
      if (!t->merges.empty())
        t->merges[rng->below(t->merges.size())] = rng->one_in(2) ? static_cast<int64_t>(rng->below(n)) : edge_value(rng, n);
      break;
    case 1:  // swap two merges (new ranks)
      if (t->merges.size() >= 4) {
        const size_t a = 2 * rng->below(t->merges.size() / 2), b = 2 * rng->below(t->merges.size() / 2);
        std::swap(t->merges[a], t->merges[b]);
        std::swap(t->merges[a + 1], t->merges[b + 1]);
      }
      break;
    case 2:  // drop a merge
      if (t->merges.size() >= 2) {
        const size_t a = 2 * rng->below(t->merges.size() / 2);
        t->merges.erase(t->merges.begin() + a, t->merges.begin() + a + 2);
      }
      break;
    case 3: {  // a vocab token's bytes changed: cut, extended, flipped (may become invalid UTF-8)
      std::string& s = t->vocab[rng->below(t->vocab.size())];
      if (rng->one_in(3) && !s.empty()) s.pop_back();
      else if (rng->one_in(2)) s += static_cast<char>(rng->next());
      else if (!s.empty()) s[rng->below(s.size())] ^= static_cast<char>(1 << rng->below(8));
      break;
    }
    case 4: {
      static const std::vector<std::string> kSpaces = {"",   "\xE2\x96\x81", "\xE2\x96", "\xFF", " ",
                                                       "ab", "<bos>",        "\xC3",     "  "};
      t->space_replacement = rng->pick(kSpaces);
      break;
    }
    case 5:
      t->byte_fallback = !t->byte_fallback;
      if (rng->one_in(2)) t->fuse_unk = !t->fuse_unk;
      if (rng->one_in(2))
        t->unk_id = rng->one_in(2) ? -1 : rng->one_in(2) ? static_cast<int64_t>(rng->below(n)) : edge_value(rng, 0);
      break;
    case 6:  // an added token that overlaps others, or is a vocab token, or is random bytes
      if (!t->added_tokens.empty() && rng->one_in(2)) {
        const std::string& other = rng->pick(t->added_tokens);
        t->added_tokens.push_back(other.substr(0, 1 + rng->below(other.size())) + (rng->one_in(2) ? "x" : ""));
      } else {
        t->added_tokens.push_back(rng->one_in(2) ? rng->pick(t->vocab) : random_bytes(rng, 1 + rng->below(4)));
      }
      t->added_token_ids.push_back(rng->one_in(4) ? edge_value(rng, n) : static_cast<int64_t>(rng->below(n + 10)));
      break;
    case 7:
      spread_ids(t);
      break;
    default:  // a byte token lost: partial byte fallback
      for (auto& s : t->vocab)
        if (s.size() == 6 && s.compare(0, 3, "<0x") == 0 && rng->one_in(16)) s += "x";
  }
}

void fuzz_nfc_tables(const NfcTables& real, const Pools& p, uint64_t seed, size_t count) {
  Rng rng(seed ^ 0x4E4643);
  const int before = g_failed;
  size_t built = 0, refused = 0;
  for (size_t i = 0; i < count; ++i) {
    NfcTables t = real;
    for (size_t k = 1 + rng.below(3); k > 0; --k) mutate_nfc(&t, &rng, p);
    NfcTableError error;
    const auto nfc = NfcNormalizer::build(t, &error);
    const std::string what = "nfc mutated tables " + std::to_string(i);
    if (!nfc) {
      ++refused;
      check(!error.problem.empty() && *error.table, what, "refused without a reason");
      continue;
    }
    ++built;
    for (int k = 0; k < 30; ++k) run_nfc(*nfc, hostile(&rng, p), what, false);
  }
  std::printf("nfc mutated tables: %s (%zu built and run, %zu refused)\n", g_failed == before ? "ok" : "FAILED", built,
              refused);
}

void fuzz_bpe_tables(const BpeTables& base, const Pools& p, uint64_t seed, size_t count, const std::string& name) {
  Rng rng(seed ^ 0x425045);
  const int before = g_failed;
  size_t built = 0, refused = 0;
  for (size_t i = 0; i < count; ++i) {
    BpeTables t = base;
    for (size_t k = 1 + rng.below(3); k > 0; --k) mutate_bpe(&t, &rng);
    BpeTableError error;
    const auto bpe = ByteFallbackBpe::build(t, &error);
    const std::string what = name + " mutated tables " + std::to_string(i);
    if (!bpe) {
      ++refused;
      check(!error.problem.empty() && *error.attribute, what, "refused without a reason");
      continue;
    }
    ++built;
    const auto ids = ids_of(t);
    for (int k = 0; k < 30; ++k) run_bpe(*bpe, hostile(&rng, p), ids, what, &rng);
  }
  std::printf("%s mutated tables: %s (%zu built and run, %zu refused)\n", name.c_str(),
              g_failed == before ? "ok" : "FAILED", built, refused);
}

// Truncated or corrupted table files: the reader refuses them (never reads past the data).
void check_truncated_files(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const bool bpe = data.compare(0, 8, "TXTBPT01") == 0;
  size_t refused = 0, cuts = 0;
  for (size_t cut = 0; cut < data.size(); cut += 1 + cut / 8, ++cuts) {
    try {
      if (bpe) load_bpe_tables(ItemReader(path, data.substr(0, cut)));
      else load_nfc_tables(ItemReader(path, data.substr(0, cut)));
    } catch (const std::runtime_error&) {
      ++refused;
    }
  }
  check(refused == cuts, path + " cut short",
        std::to_string(cuts - refused) + " of " + std::to_string(cuts) + " cuts accepted");
}

struct Options {
  uint64_t seed;
  size_t rounds, mutations;
};

// One NFC table set: build, vectors, stress; malformed and mutated tables. Adds the tables' code
// points to *pools (the BPE sets' stress uses them too).
void run_nfc_set(const std::string& tables_path, const std::string& vectors_path, const std::string& name,
                 const Options& options, Pools* pools) {
  const NfcTables tables = load_nfc_tables(ItemReader(tables_path));
  NfcTableError error;
  const auto nfc = NfcNormalizer::build(tables, &error);
  if (!check(nfc != nullptr, name + " build", std::string(error.table) + ": " + error.problem)) return;
  check_nfc_vectors(*nfc, load_vectors(ItemReader(vectors_path), false), name);
  add_code_points(tables, pools);
  stress_nfc(*nfc, *pools, options.seed, options.rounds, name);
  check_nfc_malformed(tables);
  fuzz_nfc_tables(tables, *pools, options.seed, options.mutations);
  check_truncated_files(tables_path);
}

// One BPE table set: build, vectors, stress (with the set's own tokens in the pools); malformed
// and mutated tables when the vocab is small.
void run_bpe_set(const std::string& tables_path, const std::string& vectors_path, const std::string& name,
                 const Options& options, Pools pools) {
  const BpeTables tables = load_bpe_tables(ItemReader(tables_path));
  BpeTableError error;
  const auto bpe = ByteFallbackBpe::build(tables, &error);
  if (!check(bpe != nullptr, name + " build", std::string(error.attribute) + ": " + error.problem)) return;
  check_bpe_vectors(*bpe, load_vectors(ItemReader(vectors_path), true), name);
  Rng pool_rng(options.seed);
  add_tokens(tables, &pool_rng, &pools);
  stress_bpe(*bpe, tables, pools, options.seed, options.rounds, name);
  if (tables.vocab.size() > kMutatedVocabLimit) return;
  check_bpe_malformed(tables, name);
  fuzz_bpe_tables(tables, pools, options.seed, options.mutations, name);
  check_truncated_files(tables_path);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  size_t rounds = 2000, mutations = 150;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--seed" || arg == "--rounds" || arg == "--mutations") && i + 1 < argc) {
      const uint64_t value = std::strtoull(argv[++i], nullptr, 10);
      if (arg == "--seed") seed = value;
      else (arg == "--rounds" ? rounds : mutations) = value;
    } else if (dir.empty() && arg.rfind("--", 0) != 0) {
      dir = arg;
    } else {
      std::fprintf(stderr, "usage: text_kernel_test [--seed N] [--rounds N] [--mutations N] DIR\n");
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: text_kernel_test [--seed N] [--rounds N] [--mutations N] DIR\n");
    return 2;
  }
  std::ifstream index(dir + "/index.txt");
  check(static_cast<bool>(index), "index", "cannot open " + dir + "/index.txt");
  Pools pools = base_pools();
  const Options options{seed, rounds, mutations};
  std::string kind, name;
  size_t sets = 0;
  while (index >> kind >> name) {
    ++sets;
    const std::string tables_path = dir + "/" + name + ".tables", vectors_path = dir + "/" + name + ".vectors";
    try {
      if (kind == "nfc")
        run_nfc_set(tables_path, vectors_path, name, options, &pools);
      else if (kind == "bpe")
        run_bpe_set(tables_path, vectors_path, name, options, pools);
      else
        check(false, "index", "unknown kind '" + kind + "'");
    } catch (const std::exception& e) {
      check(false, name, e.what());
    }
  }
  check(sets > 0, "index", "no table sets listed");
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
