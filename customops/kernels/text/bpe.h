// The ByteFallbackBpe op's tokenizer (docs/op.md, ByteFallbackBpe): the HF `tokenizers` library's
// encode(text, add_special_tokens=False) for SentencePiece-style BPE tokenizers such as Gemma3's:
// added tokens split off the raw text (leftmost-longest), spaces of the text between them replaced
// by a marker ("▁"), then BPE of each such segment as one word: characters looked up in the vocab,
// unknown ones as their UTF-8 byte tokens "<0xXX>" (byte fallback) or the unk token (runs fused),
// then the adjacent pair of lowest merge rank merged first (ties: leftmost) until none is left.
// Pure C++ (no ORT headers); O(n log n) per segment (a heap of candidate merges over linked symbols).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace bitnet_onnx {
namespace text {

// The tokenizer's tables, as the op's attributes hold them (validated by ByteFallbackBpe::build).
struct BpeTables {
  std::vector<std::string> vocab;            // the model's token strings
  std::vector<int64_t> vocab_ids;            // id of vocab[i]; empty: i
  std::vector<int64_t> merges;               // [left id, right id] pairs, flattened, in rank order
  std::vector<std::string> added_tokens;     // matched on the raw text, never normalized
  std::vector<int64_t> added_token_ids;      // id of added_tokens[i] (need not be a vocab id)
  int64_t unk_id = -1;                       // -1: unknown characters are dropped (as HF does)
  bool fuse_unk = false;                     // consecutive unknown characters give one unk
  bool byte_fallback = false;                // unknown characters as their "<0xXX>" byte tokens
  std::string space_replacement = "\xE2\x96\x81";  // what each ' ' becomes before BPE ("▁")
};

// Why build() refused the tables: the attribute (named as in the op) and the problem.
struct BpeTableError {
  const char* attribute = "";
  std::string problem;
};

// encode()'s answer: the ids, or why the text has none.
struct BpeResult {
  std::vector<int64_t> ids;
  std::string error;  // empty: ids are the text's tokens
  bool ok() const { return error.empty(); }
};

// Open-addressing hash map from 64-bit keys (never ~0) to 64-bit values, linear probing.
class FlatMap64 {
 public:
  void reserve(size_t count);
  void put(uint64_t key, uint64_t value);  // inserts or overwrites
  const uint64_t* find(uint64_t key) const;
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    uint64_t value = 0;
  };
  size_t slot_of(uint64_t key) const;
  std::vector<Slot> slots_;
  size_t size_ = 0;
  unsigned shift_ = 64;
};

class ByteFallbackBpe {
 public:
  // The tokenizer of these tables, or nullptr with *error set when they are inconsistent: ids
  // outside [0, 2^31 - 1), duplicate tokens or ids, a merge of ids no vocab token has or whose
  // concatenation is not in the vocab, empty or non-UTF-8 added tokens, an unk_id not in the vocab.
  static std::unique_ptr<ByteFallbackBpe> build(const BpeTables& tables, BpeTableError* error);

  // The ids of `text` (UTF-8), at most max_tokens of them (0: all). Segments after the one that
  // reaches max_tokens are not tokenized: BPE of a segment never depends on the later ones.
  // Not valid UTF-8 (overlong forms, surrogates, beyond U+10FFFF, truncated): an error, naming
  // the byte offset; never reads outside text.
  BpeResult encode(std::string_view text, size_t max_tokens) const;

 private:
  ByteFallbackBpe() = default;
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  bool find_merge(int32_t left, int32_t right, Merge* merge) const;
  int32_t char_id(uint32_t code_point) const;
  // Length and id of the longest added token at text[pos...]; length 0 when none starts there.
  size_t longest_added_token(std::string_view text, size_t pos, int32_t* id) const;
  // Appends the ids of one segment of raw text between added tokens (normalize, then BPE).
  void encode_segment(std::string_view segment, std::vector<int64_t>* ids) const;
  void encode_word(std::string_view word, std::vector<int64_t>* ids) const;

  std::vector<int32_t> bmp_char_ids_;  // id of the one-character token per code point < 0x10000, or -1
  FlatMap64 astral_char_ids_;          // the same for code points >= 0x10000
  int32_t byte_ids_[256];              // id of "<0xXX>", or -1
  FlatMap64 merges_;                   // left << 32 | right -> rank << 32 | merged id
  FlatMap64 trie_edges_;               // node << 8 | byte -> child node (added tokens, node 0 = root)
  std::vector<int32_t> trie_token_;    // added token id ending at each node, or -1
  bool may_start_added_[256] = {};     // first bytes of the added tokens
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  std::string space_replacement_;
};

}  // namespace text
}  // namespace bitnet_onnx
