// ByteFallbackBpe: table validation and indexing, added-token splitting, and HF's BPE word merge
// (tokenizers/src/models/bpe: model.rs merge_word, word.rs merge_all), reproduced id for id,
// including its corners: a pending unk is emitted only before the next in-vocab character (byte
// fallback tokens do not flush it), and a queued merge is stale unless the pair now at its
// position merges into the same id.
#include "bpe.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "utf8.h"

namespace bitnet_onnx {
namespace text {
namespace {

constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max() - 1;
constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

bool valid_id(int64_t id) { return id >= 0 && id <= kMaxId; }

// The one code point a valid UTF-8 string consists of, or false.
bool single_code_point(const std::string& s, uint32_t* cp) {
  const char* problem;
  char32_t c = 0;
  if (s.empty() || decode_utf8(reinterpret_cast<const unsigned char*>(s.data()), s.size(), 0, &c, &problem) != s.size())
    return false;
  *cp = c;
  return true;
}

uint64_t pair_key(int32_t left, int32_t right) {
  return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
}

// s in quotes for an error message, cut after about 40 bytes (at a character boundary).
std::string quoted(const std::string& s) {
  size_t shown = 40;
  if (s.size() <= shown) return "'" + s + "'";
  while (shown > 0 && (static_cast<unsigned char>(s[shown]) & 0xC0) == 0x80) --shown;
  return "'" + s.substr(0, shown) + "...'";
}

// A queued merge: the pair at symbol `pos` and its right neighbour, as it was when queued.
struct Candidate {
  uint64_t order;  // rank << 32 | pos: lowest rank first, then leftmost (HF's Merge ordering)
  int32_t new_id;
};
struct LaterFirst {
  bool operator()(const Candidate& a, const Candidate& b) const { return a.order > b.order; }
};

struct Symbol {
  int32_t id;
  uint32_t prev, next;  // kNone at the ends
  bool alive;
};

}  // namespace

// --- FlatMap64 ---------------------------------------------------------------------------------

size_t FlatMap64::slot_of(uint64_t key) const {
  // Fibonacci hashing: the top bits of key * 2^64 / phi.
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
}

void FlatMap64::reserve(size_t count) {
  size_t capacity = 16;
  unsigned bits = 4;
  while (capacity < 2 * count) capacity <<= 1, ++bits;  // load factor <= 1/2
  if (capacity <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  shift_ = 64 - bits;
  size_ = 0;
  for (const Slot& s : old)
    if (s.key != kEmpty) put(s.key, s.value);
}

void FlatMap64::put(uint64_t key, uint64_t value) {
  if (2 * (size_ + 1) > slots_.size()) reserve(2 * (size_ + 1));
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_of(key);; i = (i + 1) & mask) {
    if (slots_[i].key == key) {
      slots_[i].value = value;
      return;
    }
    if (slots_[i].key == kEmpty) {
      slots_[i] = Slot{key, value};
      ++size_;
      return;
    }
  }
}

const uint64_t* FlatMap64::find(uint64_t key) const {
  if (slots_.empty()) return nullptr;
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_of(key);; i = (i + 1) & mask) {
    if (slots_[i].key == key) return &slots_[i].value;
    if (slots_[i].key == kEmpty) return nullptr;
  }
}

// --- build -------------------------------------------------------------------------------------

std::unique_ptr<ByteFallbackBpe> ByteFallbackBpe::build(const BpeTables& t, BpeTableError* error) {
  auto fail = [&](const char* attribute, std::string problem) {
    *error = BpeTableError{attribute, std::move(problem)};
    return nullptr;
  };
  std::unique_ptr<ByteFallbackBpe> bpe(new ByteFallbackBpe());

  // Vocab: unique strings, unique ids in range.
  if (!t.vocab_ids.empty() && t.vocab_ids.size() != t.vocab.size())
    return fail("vocab_ids", "has " + std::to_string(t.vocab_ids.size()) + " ids for " +
                                 std::to_string(t.vocab.size()) + " vocab tokens");
  if (t.vocab.size() > static_cast<size_t>(kMaxId))
    return fail("vocab", "has more than 2^31 - 2 tokens");
  std::vector<int32_t> ids(t.vocab.size());
  FlatMap64 index_of_id;  // id -> position in vocab
  index_of_id.reserve(t.vocab.size());
  for (size_t i = 0; i < t.vocab.size(); ++i) {
    const int64_t id = t.vocab_ids.empty() ? static_cast<int64_t>(i) : t.vocab_ids[i];
    if (!valid_id(id)) return fail("vocab_ids", "id " + std::to_string(id) + " is outside [0, 2^31 - 2]");
    if (index_of_id.find(static_cast<uint64_t>(id)))
      return fail("vocab_ids", "id " + std::to_string(id) + " is given to two vocab tokens");
    index_of_id.put(static_cast<uint64_t>(id), i);
    ids[i] = static_cast<int32_t>(id);
  }
  std::unordered_map<std::string_view, int32_t> id_of_token;
  id_of_token.reserve(t.vocab.size());
  for (size_t i = 0; i < t.vocab.size(); ++i)
    if (!id_of_token.emplace(t.vocab[i], ids[i]).second)
      return fail("vocab", "token " + quoted(t.vocab[i]) + " appears twice");

  // One-character tokens and byte tokens: what a word starts as.
  bpe->bmp_char_ids_.assign(0x10000, -1);
  for (size_t i = 0; i < t.vocab.size(); ++i) {
    uint32_t cp;
    if (!single_code_point(t.vocab[i], &cp)) continue;
    if (cp < 0x10000)
      bpe->bmp_char_ids_[cp] = ids[i];
    else
      bpe->astral_char_ids_.put(cp, static_cast<uint64_t>(ids[i]));
  }
  for (int b = 0; b < 256; ++b) {
    static const char kHex[] = "0123456789ABCDEF";
    const std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";  // HF's format!("<{b:#04X}>")
    const auto found = id_of_token.find(name);
    bpe->byte_ids_[b] = found == id_of_token.end() ? -1 : found->second;
  }

  // Merges: rank = position; a repeated pair keeps its last rank (HF collects them into a map).
  if (t.merges.size() % 2 != 0)
    return fail("merges", "has an odd number of ids (" + std::to_string(t.merges.size()) + "): it holds [left, right] pairs");
  const size_t pairs = t.merges.size() / 2;
  if (pairs > std::numeric_limits<uint32_t>::max()) return fail("merges", "has more than 2^32 - 1 pairs");
  bpe->merges_.reserve(pairs);
  std::string merged;
  for (size_t k = 0; k < pairs; ++k) {
    const std::string* parts[2];
    for (int side = 0; side < 2; ++side) {
      const int64_t id = t.merges[2 * k + side];
      const uint64_t* at = valid_id(id) ? index_of_id.find(static_cast<uint64_t>(id)) : nullptr;
      if (!at)
        return fail("merges", "pair " + std::to_string(k) + " has id " + std::to_string(id) + ", which no vocab token has");
      parts[side] = &t.vocab[*at];
    }
    merged.assign(*parts[0]).append(*parts[1]);
    const auto found = id_of_token.find(merged);
    if (found == id_of_token.end())
      return fail("merges", "pair " + std::to_string(k) + " (" + quoted(*parts[0]) + ", " + quoted(*parts[1]) +
                                "): " + quoted(merged) + " is not in the vocab");
    const auto left = static_cast<int32_t>(t.merges[2 * k]), right = static_cast<int32_t>(t.merges[2 * k + 1]);
    bpe->merges_.put(pair_key(left, right), static_cast<uint64_t>(k) << 32 | static_cast<uint32_t>(found->second));
  }

  // Added tokens: a byte trie, longest match per start position.
  if (t.added_token_ids.size() != t.added_tokens.size())
    return fail("added_token_ids", "has " + std::to_string(t.added_token_ids.size()) + " ids for " +
                                       std::to_string(t.added_tokens.size()) + " added tokens");
  bpe->trie_token_.assign(1, -1);
  for (size_t i = 0; i < t.added_tokens.size(); ++i) {
    const std::string& token = t.added_tokens[i];
    const char* problem;
    if (token.empty()) return fail("added_tokens", "token " + std::to_string(i) + " is empty");
    if (first_invalid_utf8(token, &problem) != token.size())
      return fail("added_tokens", "token " + std::to_string(i) + " is not valid UTF-8 (" + problem + ")");
    if (!valid_id(t.added_token_ids[i]))
      return fail("added_token_ids", "id " + std::to_string(t.added_token_ids[i]) + " is outside [0, 2^31 - 2]");
    uint64_t node = 0;
    for (unsigned char byte : token) {
      const uint64_t edge = node << 8 | byte;
      if (const uint64_t* child = bpe->trie_edges_.find(edge)) {
        node = *child;
        continue;
      }
      bpe->trie_edges_.put(edge, bpe->trie_token_.size());
      node = bpe->trie_token_.size();
      bpe->trie_token_.push_back(-1);
    }
    if (bpe->trie_token_[node] >= 0) return fail("added_tokens", "token " + quoted(token) + " appears twice");
    bpe->trie_token_[node] = static_cast<int32_t>(t.added_token_ids[i]);
    bpe->may_start_added_[static_cast<unsigned char>(token[0])] = true;
  }

  if (t.unk_id != -1 && !(valid_id(t.unk_id) && index_of_id.find(static_cast<uint64_t>(t.unk_id))))
    return fail("unk_id", std::to_string(t.unk_id) + " is neither -1 (none) nor a vocab id");
  bpe->unk_id_ = static_cast<int32_t>(t.unk_id);
  bpe->fuse_unk_ = t.fuse_unk;
  bpe->byte_fallback_ = t.byte_fallback;
  const char* problem;
  if (first_invalid_utf8(t.space_replacement, &problem) != t.space_replacement.size())
    return fail("space_replacement", std::string("is not valid UTF-8 (") + problem + ")");
  bpe->space_replacement_ = t.space_replacement;
  return bpe;
}

// --- encode ------------------------------------------------------------------------------------

bool ByteFallbackBpe::find_merge(int32_t left, int32_t right, Merge* merge) const {
  const uint64_t* found = merges_.find(pair_key(left, right));
  if (!found) return false;
  *merge = Merge{static_cast<uint32_t>(*found >> 32), static_cast<int32_t>(static_cast<uint32_t>(*found))};
  return true;
}

int32_t ByteFallbackBpe::char_id(uint32_t code_point) const {
  if (code_point < 0x10000) return bmp_char_ids_[code_point];
  const uint64_t* found = astral_char_ids_.find(code_point);
  return found ? static_cast<int32_t>(*found) : -1;
}

size_t ByteFallbackBpe::longest_added_token(std::string_view text, size_t pos, int32_t* id) const {
  size_t longest = 0;
  uint64_t node = 0;
  for (size_t end = pos; end < text.size(); ++end) {
    const uint64_t* child = trie_edges_.find(node << 8 | static_cast<unsigned char>(text[end]));
    if (!child) break;
    node = *child;
    if (trie_token_[node] >= 0) {
      longest = end + 1 - pos;
      *id = trie_token_[node];
    }
  }
  return longest;
}

BpeResult ByteFallbackBpe::encode(std::string_view text, size_t max_tokens) const {
  BpeResult result;
  const char* problem = "";
  const size_t bad = first_invalid_utf8(text, &problem);
  if (bad != text.size()) {
    result.error = std::string("not valid UTF-8: ") + problem + " at byte " + std::to_string(bad);
    return result;
  }
  // A word's symbols are indexed with uint32 (each byte gives at most one, each space
  // space_replacement.size() of them).
  const size_t growth = std::max<size_t>(1, space_replacement_.size());
  if (text.size() > (kNone - 1) / growth) {
    result.error = "too long: " + std::to_string(text.size()) + " bytes (the limit is " +
                   std::to_string((kNone - 1) / growth) + ")";
    return result;
  }
  auto full = [&] { return max_tokens != 0 && result.ids.size() >= max_tokens; };
  size_t segment_start = 0, pos = 0;
  while (pos < text.size() && !full()) {
    int32_t id = -1;
    const size_t length =
        may_start_added_[static_cast<unsigned char>(text[pos])] ? longest_added_token(text, pos, &id) : 0;
    if (length == 0) {
      ++pos;
      continue;
    }
    encode_segment(text.substr(segment_start, pos - segment_start), &result.ids);
    if (full()) break;
    result.ids.push_back(id);
    pos += length;
    segment_start = pos;
  }
  if (!full()) encode_segment(text.substr(segment_start), &result.ids);
  if (full()) result.ids.resize(max_tokens);
  return result;
}

void ByteFallbackBpe::encode_segment(std::string_view segment, std::vector<int64_t>* ids) const {
  if (segment.find(' ') == std::string_view::npos) return encode_word(segment, ids);
  std::string normalized;
  normalized.reserve(segment.size() + 2 * space_replacement_.size());
  for (char c : segment) {
    if (c == ' ')
      normalized += space_replacement_;
    else
      normalized += c;
  }
  encode_word(normalized, ids);
}

void ByteFallbackBpe::encode_word(std::string_view word, std::vector<int64_t>* ids) const {
  if (word.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto at = static_cast<uint32_t>(symbols.size());
    if (at > 0) symbols.back().next = at;
    symbols.push_back(Symbol{id, at > 0 ? at - 1 : kNone, kNone, true});
  };

  // The initial symbols (HF's merge_word).
  const auto* p = reinterpret_cast<const unsigned char*>(word.data());
  bool unk_pending = false;
  for (size_t pos = 0; pos < word.size();) {
    char32_t cp = 0;
    const char* problem;
    size_t length = decode_utf8(p, word.size(), pos, &cp, &problem);
    if (length == 0) length = 1;  // unreachable: encode() validated the text
    const int32_t id = char_id(cp);
    if (id >= 0) {
      if (unk_pending) add(unk_id_), unk_pending = false;
      add(id);
    } else if (byte_fallback_ && std::all_of(p + pos, p + pos + length, [&](unsigned char b) { return byte_ids_[b] >= 0; })) {
      for (size_t k = 0; k < length; ++k) add(byte_ids_[p[pos + k]]);  // a pending unk stays pending
    } else if (unk_id_ >= 0) {
      if (unk_pending && !fuse_unk_) add(unk_id_);
      unk_pending = true;
    }  // no unk token: the character is dropped
    pos += length;
  }
  if (unk_pending) add(unk_id_);
  if (symbols.empty()) return;

  // Merge the lowest-ranked adjacent pair until none is left (HF's Word::merge_all).
  std::vector<Candidate> queue;
  queue.reserve(symbols.size());
  Merge m;
  for (uint32_t i = 0; i + 1 < symbols.size(); ++i)
    if (find_merge(symbols[i].id, symbols[i + 1].id, &m)) queue.push_back({uint64_t{m.rank} << 32 | i, m.new_id});
  std::make_heap(queue.begin(), queue.end(), LaterFirst{});
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), LaterFirst{});
    const Candidate top = queue.back();
    queue.pop_back();
    const auto pos = static_cast<uint32_t>(top.order);
    Symbol& left = symbols[pos];
    if (!left.alive || left.next == kNone) continue;
    Symbol& right = symbols[left.next];
    if (!find_merge(left.id, right.id, &m) || m.new_id != top.new_id) continue;  // stale
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next != kNone) symbols[left.next].prev = pos;
    auto queue_pair = [&](uint32_t at) {
      if (find_merge(symbols[at].id, symbols[symbols[at].next].id, &m)) {
        queue.push_back({uint64_t{m.rank} << 32 | at, m.new_id});
        std::push_heap(queue.begin(), queue.end(), LaterFirst{});
      }
    };
    if (left.prev != kNone) queue_pair(left.prev);
    if (left.next != kNone) queue_pair(pos);
  }
  for (uint32_t at = 0; at != kNone; at = symbols[at].next) ids->push_back(symbols[at].id);
}

}  // namespace text
}  // namespace bitnet_onnx
