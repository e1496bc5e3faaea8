// BpeTokenizer: reading and checking tokenizer.json, splitting out added tokens, merging each
// pre-tokenized piece (through a per-thread cache of encoded pieces), decode and split_point. The
// pre-tokenizer itself (UTF-8, character classes, GPT-2's pattern) is data/gpt2_pretokenizer.h.
#include "data/bpe_tokenizer.h"

#include "data/gpt2_pretokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>

namespace tidal::data {
namespace {

// ---- The per-thread cache of encoded pieces ----

inline std::uint64_t mix(std::uint64_t h) {
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

// The first min(n, 8) bytes at p as an integer (little-endian, zero above): whole 4- and 8-byte
// loads, overlapping, instead of a byte loop.
inline std::uint64_t load_prefix(const char* p, std::size_t n) {
  if (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
  }
  if (n >= 4) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return lo | std::uint64_t(hi) << ((n - 4) * 8);
  }
  if (n == 0) return 0;
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return b[0] | std::uint64_t(b[n / 2]) << (n / 2 * 8) | std::uint64_t(b[n - 1]) << ((n - 1) * 8);
}

inline std::uint64_t hash_piece(std::string_view s, std::uint64_t prefix) {
  std::uint64_t h = (prefix ^ (0x9E3779B97F4A7C15ull * (s.size() + 1))) * 0xBF58476D1CE4E5B9ull;
  for (std::size_t i = 8; i < s.size(); i += 8)
    h = (h ^ load_prefix(s.data() + i, s.size() - i)) * 0xBF58476D1CE4E5B9ull;
  return mix(h);
}

// Open addressing over pieces up to kMaxPiece bytes; emptied when full or when the thread starts
// encoding with another tokenizer. Also holds the thread's scratch space for merging.
class PieceCache {
 public:
  static constexpr std::size_t kMaxPiece = 64;  // longer pieces are mostly one-offs (a CJK sentence)

  static PieceCache& of_thread(std::uint64_t owner) {
    thread_local PieceCache cache;
    if (cache.owner_ != owner) {
      cache.clear();
      cache.owner_ = owner;
    }
    return cache;
  }

  // Appends the ids of `piece` to `out` if it is here.
  bool append(std::string_view piece, std::uint64_t hash, std::uint64_t prefix, std::vector<std::uint32_t>& out) const {
    for (std::size_t k = hash & kMask;; k = (k + 1) & kMask) {
      const Slot& slot = slots_[k];
      if (slot.key_len == 0) return false;
      if (slot.prefix == prefix && slot.tag == std::uint32_t(hash >> 32) && slot.key_len == piece.size() &&
          (piece.size() <= 8 || std::memcmp(keys_.data() + slot.key_at, piece.data() + 8, piece.size() - 8) == 0)) {
        if (slot.id_count == 1) {
          out.push_back(slot.ids);
        } else {
          out.insert(out.end(), ids_.data() + slot.ids, ids_.data() + slot.ids + slot.id_count);
        }
        return true;
      }
    }
  }

  void insert(std::string_view piece, std::uint64_t hash, std::uint64_t prefix, const std::uint32_t* ids,
              std::size_t count) {
    if (piece.empty() || piece.size() > kMaxPiece) return;
    if (used_ >= kCapacity / 2) clear();
    std::size_t k = hash & kMask;
    while (slots_[k].key_len != 0) k = (k + 1) & kMask;
    slots_[k] = {prefix,
                 std::uint32_t(hash >> 32),
                 std::uint32_t(keys_.size()),
                 count == 1 ? ids[0] : std::uint32_t(ids_.size()),
                 std::uint16_t(piece.size()),
                 std::uint16_t(count)};
    if (piece.size() > 8) keys_.append(piece.substr(8));
    if (count != 1) ids_.insert(ids_.end(), ids, ids + count);
    ++used_;
  }

  struct Symbol {
    std::uint32_t id;
    std::int32_t prev, next;  // neighbours in the word, -1 at its ends; prev = -2 once merged away
    std::uint32_t size;       // the initial symbols it spans (from its own position on)
  };
  // A pair that merges. Its two symbols are unchanged while they span what they did (the same
  // initial symbols make the same token), so a candidate is checked without a second look-up.
  struct Candidate {
    std::uint64_t key;  // rank << 32 | position of the pair's left symbol: the smallest merges first
    std::uint32_t id, left_size, right_size;
    bool operator>(const Candidate& o) const { return key > o.key; }
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;

 private:
  static constexpr std::size_t kCapacity = std::size_t(1) << 17, kMask = kCapacity - 1;  // 3 MiB of slots
  // A piece: its first 8 bytes here, the rest in keys_; its one id here, or several in ids_.
  struct Slot {
    std::uint64_t prefix;
    std::uint32_t tag;  // the hash's high half (the low half picked the slot)
    std::uint32_t key_at, ids;
    std::uint16_t key_len, id_count;  // key_len 0: an empty slot
  };

  PieceCache() : slots_(kCapacity) {}
  void clear() {
    if (used_ == 0) return;
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }

  std::uint64_t owner_ = 0;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<std::uint32_t> ids_;
  std::size_t used_ = 0;
};

std::atomic<std::uint64_t> next_serial{1};

// ---- Reading tokenizer.json ----

using nlohmann::json;

// GPT-2's byte -> code point map: printable Latin-1 bytes stand for themselves, the other 68
// bytes (controls, space, DEL, NBSP, soft hyphen) for U+0100 onwards in byte order.
std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t extra = 256;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    map[b] = printable ? char32_t(b) : extra++;
  }
  return map;
}

}  // namespace

std::string byte_level_spelling(unsigned char b) {
  static const std::array<char32_t, 256> map = byte_to_unicode();
  std::string out;
  gpt2::append_utf8(out, map[b]);
  return out;
}

namespace {

struct TokenBytes {
  std::string bytes;
  bool byte_level;  // every character was one of the 256 byte characters
};

// A vocabulary token's bytes: each byte character as its byte; any other character (an added
// token's content, say) as its own UTF-8.
TokenBytes token_bytes(const std::string& token) {
  static const std::vector<std::int16_t> byte_of = [] {
    std::vector<std::int16_t> v(512, -1);
    const auto map = byte_to_unicode();
    for (unsigned b = 0; b < 256; ++b) v[map[b]] = std::int16_t(b);
    return v;
  }();
  TokenBytes out{{}, true};
  const auto* s = reinterpret_cast<const unsigned char*>(token.data());
  for (std::size_t i = 0, len; i < token.size(); i += len) {
    const char32_t c = gpt2::decode_at(s, i, len);
    if (c < byte_of.size() && byte_of[c] >= 0) {
      out.bytes += char(byte_of[c]);
    } else {
      gpt2::append_utf8(out.bytes, c);
      out.byte_level = false;
    }
  }
  return out;
}

std::string type_of(const json& j) { return j.is_object() && j.contains("type") ? j["type"].dump() : j.dump(); }

bool flag(const json& obj, const char* key, bool fallback, const std::string& where, const std::string& path) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  TIDAL_CHECK(obj[key].is_boolean(), "tokenizer.json '{}': {}.{} must be true or false, got {}", path, where, key,
              obj[key].dump());
  return obj[key].get<bool>();
}

// The ByteLevel pre-tokenizer, alone or as the one member of a Sequence.
const json& byte_level_pre_tokenizer(const json& root, const std::string& path) {
  const char* fix = "tidal tokenize reads byte-level BPE (GPT-2 style): a ByteLevel pre_tokenizer only";
  TIDAL_CHECK(root.contains("pre_tokenizer") && root["pre_tokenizer"].is_object(),
              "tokenizer.json '{}': pre_tokenizer is {}; {}", path,
              root.contains("pre_tokenizer") ? root["pre_tokenizer"].dump() : "missing", fix);
  const json* pre = &root["pre_tokenizer"];
  if (pre->value("type", "") == "Sequence") {
    const std::size_t n = pre->contains("pretokenizers") ? (*pre)["pretokenizers"].size() : 0;
    TIDAL_CHECK(n == 1 && (*pre)["pretokenizers"].is_array(),
                "tokenizer.json '{}': pre_tokenizer is a Sequence of {} pre-tokenizers; {}", path, n, fix);
    pre = &(*pre)["pretokenizers"][0];
  }
  TIDAL_CHECK(pre->value("type", "") == "ByteLevel", "tokenizer.json '{}': pre_tokenizer.type is {}; {}", path,
              type_of(*pre), fix);
  return *pre;
}

// What surrounds the model: nothing there may change the text or add ids.
void check_pipeline(const json& root, const std::string& path) {
  TIDAL_CHECK(!root.contains("normalizer") || root["normalizer"].is_null(),
              "tokenizer.json '{}': normalizer is {}; tidal tokenize applies no normalizer (byte-level BPE as GPT-2's "
              "has none): set it to null or use a GPT-2 style tokenizer",
              path, type_of(root["normalizer"]));
  for (const char* key : {"post_processor", "decoder"}) {
    if (!root.contains(key) || root[key].is_null()) continue;
    TIDAL_CHECK(root[key].value("type", "") == "ByteLevel",
                "tokenizer.json '{}': {}.type is {}; tidal tokenize reads byte-level BPE (GPT-2 style), whose {} is "
                "ByteLevel or null (tokens between documents come from --eot)",
                path, key, type_of(root[key]), key);
  }
  for (const char* key : {"truncation", "padding"}) {
    TIDAL_CHECK(!root.contains(key) || root[key].is_null(),
                "tokenizer.json '{}': {} is set; tidal tokenize encodes whole documents: set {} to null", path, key,
                key);
  }
}

}  // namespace

InvalidUtf8::InvalidUtf8(std::size_t offset)
    : Error(fmt::format("text is not UTF-8 (a malformed sequence at byte {})", offset)), offset_(offset) {}

constexpr std::uint64_t kMaxId = 0x7FFFFFFF;  // ids are int32 in token files

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TIDAL_CHECK(in.good(), "cannot open tokenizer.json '{}': no such file or not readable", path);
  json root;
  try {
    root = json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  } catch (const json::exception& e) {
    throw Error(fmt::format("tokenizer.json '{}' is not valid JSON ({}): is the file complete?", path, e.what()));
  }
  try {
    return from_json(root, path);
  } catch (const json::exception& e) {  // a value of the wrong type where the checks did not look
    throw Error(
        fmt::format("tokenizer.json '{}' is not laid out as a Hugging Face tokenizer.json: {}", path, e.what()));
  }
}

BpeTokenizer BpeTokenizer::from_json(const nlohmann::json& root, const std::string& path) {
  TIDAL_CHECK(root.is_object() && root.contains("model") && root["model"].is_object(),
              "tokenizer.json '{}': no 'model' object; is this a Hugging Face tokenizer.json?", path);
  const json& model = root["model"];
  TIDAL_CHECK(model.value("type", "BPE") == "BPE",
              "tokenizer.json '{}': model.type is {}; tidal tokenize reads byte-level BPE (GPT-2 style) only", path,
              model["type"].dump());
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    TIDAL_CHECK(!model.contains(key) || model[key].is_null() || model[key] == "",
                "tokenizer.json '{}': model.{} is {}; byte-level BPE (GPT-2 style) has none: tidal tokenize does not "
                "read it",
                path, key, model[key].dump());
  }
  TIDAL_CHECK(!model.contains("dropout") || model["dropout"].is_null(),
              "tokenizer.json '{}': model.dropout is {}; BPE dropout samples merges at random, and tidal tokenize "
              "encodes deterministically: set it to null",
              path, model["dropout"].dump());
  TIDAL_CHECK(!flag(model, "byte_fallback", false, "model", path),
              "tokenizer.json '{}': model.byte_fallback is true; byte-level BPE needs no byte fallback and tidal "
              "tokenize does not read it: set it to false",
              path);
  check_pipeline(root, path);

  gpt2::class_table();  // built (and checked against the ASCII table) before any text needs it
  BpeTokenizer t;
  t.serial_ = next_serial.fetch_add(1);
  const json& pre = byte_level_pre_tokenizer(root, path);
  t.add_prefix_space_ = flag(pre, "add_prefix_space", true, "pre_tokenizer", path);
  t.use_regex_ = flag(pre, "use_regex", true, "pre_tokenizer", path);
  t.fuse_unk_ = flag(model, "fuse_unk", false, "model", path);
  t.ignore_merges_ = flag(model, "ignore_merges", false, "model", path);

  t.read_vocab(model, path);
  t.read_merges(model, path);
  t.read_added_tokens(root, path);
  return t;
}

// The vocabulary: each token's bytes (for decode), its id by spelling, the single bytes' ids.
void BpeTokenizer::read_vocab(const nlohmann::json& model, const std::string& path) {
  TIDAL_CHECK(model.contains("vocab") && model["vocab"].is_object() && !model["vocab"].empty(),
              "tokenizer.json '{}': model.vocab must be an object of token -> id", path);
  byte_ids_.fill(-1);
  // The ids index a table of every token's bytes (0 .. N-1 in every released tokenizer.json):
  // past 2^20 slots, holes past as many as the tokens themselves are refused before the table is
  // made (one id near 2^31 would ask for 64 GiB).
  std::uint64_t largest = 0;
  for (const auto& [token, id_json] : model["vocab"].items()) {
    TIDAL_CHECK(id_json.is_number_unsigned() && id_json.get<std::uint64_t>() <= kMaxId,
                "tokenizer.json '{}': model.vocab[\"{}\"] must be an id in [0, 2^31), got {}", path, token,
                id_json.dump());
    largest = std::max(largest, id_json.get<std::uint64_t>());
  }
  const std::uint64_t tokens = model["vocab"].size();
  TIDAL_CHECK(largest < std::max<std::uint64_t>(2 * tokens, 1 << 20),
              "tokenizer.json '{}': model.vocab's ids run to {} for {} tokens; a vocabulary numbers its tokens "
              "0 .. N-1: renumber them",
              path, largest, tokens);
  token_bytes_.resize(std::size_t(largest) + 1);
  vocab_size_ = std::uint32_t(largest) + 1;
  for (const auto& [token, id_json] : model["vocab"].items()) {
    const auto id = id_json.get<std::uint32_t>();
    TIDAL_CHECK(!token.empty(), "tokenizer.json '{}': model.vocab has an empty token", path);
    TIDAL_CHECK(token_bytes_[id].empty(),
                "tokenizer.json '{}': model.vocab gives id {} to two tokens (\"{}\" and "
                "another)",
                path, id, token);
    TokenBytes b = token_bytes(token);
    if (b.byte_level) {
      if (b.bytes.size() == 1) byte_ids_[static_cast<unsigned char>(b.bytes[0])] = id;
      word_ids_.emplace(b.bytes, id);
    }
    token_bytes_[id] = std::move(b.bytes);
    token_ids_.emplace(token, id);
  }
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    const json& unk = model["unk_token"];
    TIDAL_CHECK(unk.is_string() && token_ids_.count(unk.get<std::string>()),
                "tokenizer.json '{}': model.unk_token {} is not in model.vocab", path, unk.dump());
    unk_id_ = token_ids_.at(unk.get<std::string>());
  }
}

// The merges, by rank: "a b" strings or ["a", "b"] pairs.
void BpeTokenizer::read_merges(const nlohmann::json& model, const std::string& path) {
  TIDAL_CHECK(model.contains("merges") && model["merges"].is_array(),
              "tokenizer.json '{}': model.merges must be a list of merges (\"a b\" or [\"a\", \"b\"])", path);
  const json& merges = model["merges"];
  const std::size_t table = std::bit_ceil(std::max<std::size_t>(16, merges.size() * 2));
  merges_.assign(table, {kNoPair, 0, 0});
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      TIDAL_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                  "tokenizer.json '{}': model.merges[{}] is {}; a merge is two tokens, \"a b\"", path, rank, m.dump());
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {
      TIDAL_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                  "tokenizer.json '{}': model.merges[{}] is {}; a merge is two tokens, [\"a\", \"b\"]", path, rank,
                  m.dump());
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    const auto l = token_ids_.find(left), r = token_ids_.find(right), lr = token_ids_.find(left + right);
    TIDAL_CHECK(l != token_ids_.end() && r != token_ids_.end() && lr != token_ids_.end(),
                "tokenizer.json '{}': model.merges[{}] {} names a token that is not in model.vocab (\"{}\", \"{}\" and "
                "\"{}\" must all be)",
                path, rank, m.dump(), left, right, left + right);
    const std::uint64_t key = std::uint64_t(l->second) << 32 | r->second;
    std::size_t k = mix(key) & (table - 1);
    while (merges_[k].pair != kNoPair && merges_[k].pair != key) k = (k + 1) & (table - 1);
    merges_[k] = {key, std::uint32_t(rank), lr->second};  // a repeated merge takes its last rank, as `tokenizers` does
  }
  // Most look-ups of a word's first merges are of two bytes: a table for them stays in cache.
  if (std::all_of(byte_ids_.begin(), byte_ids_.end(), [](std::int64_t id) { return id >= 0; })) {
    byte_pair_merges_.assign(256 * 256, {kNoPair, 0, 0});
    for (unsigned pair = 0; pair < 256 * 256; ++pair) {
      const Merge* m = find_merge(std::uint32_t(byte_ids_[pair >> 8]), std::uint32_t(byte_ids_[pair & 255]));
      if (m) byte_pair_merges_[pair] = *m;
    }
  }
}

// The added tokens. Their ids are those `tokenizers` gives them, whatever "id" says (it warns when
// the two differ; they agree in every file it writes): a vocabulary token's id, else the next one
// after the largest added id, at least the number of vocabulary tokens.
void BpeTokenizer::read_added_tokens(const nlohmann::json& root, const std::string& path) {
  const auto model_size = std::uint32_t(root["model"]["vocab"].size());
  splittable_ = use_regex_ && !add_prefix_space_;
  const json& added = root.value("added_tokens", json::array());
  TIDAL_CHECK(added.is_array(), "tokenizer.json '{}': added_tokens must be a list", path);
  std::optional<std::uint32_t> largest_added;
  for (std::size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    const std::string key = fmt::format("added_tokens[{}]", i);
    TIDAL_CHECK(a.is_object() && a.contains("content") && a["content"].is_string() && a["content"] != "",
                "tokenizer.json '{}': {} needs a non-empty \"content\"", path, key);
    const std::string content = a["content"].get<std::string>();
    const bool repeated = std::any_of(added_.begin(), added_.end(), [&](const AddedPass& pass) {
      return std::any_of(pass.tokens.begin(), pass.tokens.end(),
                         [&](const AddedToken& o) { return o.content == content; });
    });
    TIDAL_CHECK(!repeated, "tokenizer.json '{}': {} repeats the added token \"{}\": remove one", path, key, content);
    const auto in_vocab = token_ids_.find(content);
    std::uint32_t id = model_size;
    if (in_vocab != token_ids_.end()) {
      id = in_vocab->second;
    } else if (largest_added && *largest_added >= model_size) {
      id = *largest_added + 1;
    }
    largest_added = std::max(largest_added.value_or(0), id);
    TIDAL_CHECK(id <= kMaxId, "tokenizer.json '{}': {} would get id {}, above 2^31", path, key, id);
    vocab_size_ = std::max(vocab_size_, id + 1);
    token_bytes_.resize(vocab_size_);
    AddedToken token{content, id, flag(a, "lstrip", false, key, path), flag(a, "rstrip", false, key, path)};
    TIDAL_CHECK(!flag(a, "single_word", false, key, path),
                "tokenizer.json '{}': {}.single_word is true (\"{}\"); tidal tokenize does not read single-word added "
                "tokens: set it to false",
                path, key, token.content);
    const bool normalized = flag(a, "normalized", !flag(a, "special", false, key, path), key, path);
    if (token.lstrip || token.rstrip || token.content.find('\n', 1) != std::string::npos) splittable_ = false;
    token_bytes_[id] = token.content;
    token_ids_[token.content] = id;
    AddedPass& pass = added_[normalized ? 1 : 0];
    pass.first_byte[static_cast<unsigned char>(token.content[0])] = true;
    pass.tokens.push_back(std::move(token));
  }
  for (AddedPass& pass : added_) {
    if (std::count(pass.first_byte.begin(), pass.first_byte.end(), true) == 1)
      pass.only_first = int(std::find(pass.first_byte.begin(), pass.first_byte.end(), true) - pass.first_byte.begin());
    std::stable_sort(pass.tokens.begin(), pass.tokens.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  }
}

std::vector<std::uint32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::uint32_t> out;
  encode_into(text, out);
  return out;
}

void BpeTokenizer::encode_into(std::string_view text, std::vector<std::uint32_t>& out) const {
  const std::size_t bad = gpt2::first_invalid_utf8(text);
  if (bad != std::string_view::npos) throw InvalidUtf8(bad);
  split_added(text, 0, out);
}

// Pass 0 cuts out the added tokens with normalized=false, pass 1 those with normalized=true from
// what is left; the stretches between them go on to the next pass, then to the model. Matches are
// those of the raw text, each the longest token at the leftmost place where one starts; then, as
// `tokenizers` does, lstrip takes the white space to a match's left along (not past the previous
// match) and rstrip the white space to its right (even over the next match, which still counts),
// and the text after a match resumes where that match (stripped) ends.
void BpeTokenizer::split_added(std::string_view text, int pass, std::vector<std::uint32_t>& out) const {
  auto next = [&](std::string_view stretch) {
    if (pass == 0) {
      split_added(stretch, 1, out);
    } else {
      encode_segment(stretch, out);
    }
  };
  const AddedPass& added = added_[std::size_t(pass)];
  if (added.tokens.empty()) return next(text);
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t done = 0, p = 0;  // done: where the last match (stripped) ends
  while (p < n) {
    if (added.only_first >= 0) {
      const void* at = std::memchr(s + p, added.only_first, n - p);
      if (!at) break;
      p = std::size_t(static_cast<const unsigned char*>(at) - s);
    } else if (!added.first_byte[s[p]]) {
      ++p;
      continue;
    }
    const auto hit = std::find_if(added.tokens.begin(), added.tokens.end(),
                                  [&](const AddedToken& a) { return text.substr(p).starts_with(a.content); });
    if (hit == added.tokens.end()) {
      ++p;
      continue;
    }
    std::size_t start = p, stop = p + hit->content.size(), len;
    while (hit->lstrip && start > done) {
      std::size_t prev = start - 1;
      while ((s[prev] & 0xC0) == 0x80) --prev;
      if (gpt2::class_at(s, prev, len) != gpt2::kSpace) break;
      start = prev;
    }
    while (hit->rstrip && stop < n && gpt2::class_at(s, stop, len) == gpt2::kSpace) stop += len;
    if (done < start) next(text.substr(done, start - done));
    out.push_back(hit->id);
    done = stop;
    p += hit->content.size();
  }
  if (done < n) next(text.substr(done));
}

void BpeTokenizer::encode_segment(std::string_view segment, std::vector<std::uint32_t>& out) const {
  if (segment.empty()) return;
  if (add_prefix_space_ && segment[0] != ' ') {
    std::string spaced = " ";
    spaced.append(segment);
    return encode_pieces(spaced, out);
  }
  encode_pieces(segment, out);
}

void BpeTokenizer::encode_pieces(std::string_view segment, std::vector<std::uint32_t>& out) const {
  if (!use_regex_) return encode_word(segment, out);
  gpt2::for_each_piece(
      segment, [&](std::size_t begin, std::size_t end) { encode_word(segment.substr(begin, end - begin), out); });
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<std::uint32_t>& out) const {
  if (word.size() == 1 && byte_ids_[static_cast<unsigned char>(word[0])] >= 0) {
    out.push_back(std::uint32_t(byte_ids_[static_cast<unsigned char>(word[0])]));
    return;
  }
  PieceCache& cache = PieceCache::of_thread(serial_);
  const std::uint64_t prefix = load_prefix(word.data(), word.size()), hash = hash_piece(word, prefix);
  if (cache.append(word, hash, prefix, out)) return;
  const std::size_t before = out.size();
  merge_word(word, out);
  cache.insert(word, hash, prefix, out.data() + before, out.size() - before);
}

const BpeTokenizer::Merge* BpeTokenizer::find_merge(std::uint32_t left, std::uint32_t right) const {
  const std::uint64_t key = std::uint64_t(left) << 32 | right, mask = merges_.size() - 1;
  for (std::size_t k = mix(key) & mask;; k = (k + 1) & mask) {
    if (merges_[k].pair == key) return &merges_[k];
    if (merges_[k].pair == kNoPair) return nullptr;
  }
}

// One piece's bytes -> symbols (a byte missing from the vocabulary is the unknown token if there
// is one, else dropped, as `tokenizers` does) -> merges, the pair of smallest rank first and the
// leftmost of equal pairs first, through a heap of candidate pairs: O(n log n) in the piece's length.
void BpeTokenizer::merge_word(std::string_view word, std::vector<std::uint32_t>& out) const {
  if (ignore_merges_) {
    if (const auto it = word_ids_.find(std::string(word)); it != word_ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  PieceCache& scratch = PieceCache::of_thread(serial_);
  auto& sym = scratch.symbols;
  sym.clear();
  bool last_unknown = false;
  for (const char c : word) {
    const std::int64_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id < 0 && (!unk_id_ || (fuse_unk_ && last_unknown))) {
      last_unknown = last_unknown || bool(unk_id_);
      continue;
    }
    last_unknown = id < 0;
    const auto i = std::int32_t(sym.size());
    sym.push_back({id < 0 ? *unk_id_ : std::uint32_t(id), i - 1, i + 1, 1});
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  auto& heap = scratch.heap;
  heap.clear();
  auto consider = [&](std::int32_t left) {
    const std::int32_t right = sym[std::size_t(left)].next;
    if (right < 0) return;
    const PieceCache::Symbol &a = sym[std::size_t(left)], &b = sym[std::size_t(right)];
    const Merge* m;
    if (a.size == 1 && b.size == 1 && !byte_pair_merges_.empty()) {  // no byte was dropped: positions are offsets
      m = &byte_pair_merges_[std::size_t(static_cast<unsigned char>(word[std::size_t(left)])) << 8 |
                             static_cast<unsigned char>(word[std::size_t(right)])];
      if (m->pair == kNoPair) m = nullptr;
    } else {
      m = find_merge(a.id, b.id);
    }
    if (m) {
      heap.push_back({std::uint64_t(m->rank) << 32 | std::uint32_t(left), m->id, a.size, b.size});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (std::int32_t i = 0; i + 1 < std::int32_t(sym.size()); ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const PieceCache::Candidate c = heap.back();
    heap.pop_back();
    const auto left = std::int32_t(c.key & 0xFFFFFFFF);
    PieceCache::Symbol& a = sym[std::size_t(left)];
    if (a.prev == -2 || a.size != c.left_size || a.next < 0) continue;  // stale: a neighbour merged since
    PieceCache::Symbol& b = sym[std::size_t(a.next)];
    if (b.size != c.right_size) continue;
    a.id = c.id;
    a.size += b.size;
    a.next = b.next;
    b.prev = -2;
    if (a.next >= 0) sym[std::size_t(a.next)].prev = left;
    if (a.prev >= 0) consider(a.prev);
    consider(left);
  }
  for (std::int32_t i = 0; i >= 0; i = sym[std::size_t(i)].next) out.push_back(sym[std::size_t(i)].id);
}

std::string BpeTokenizer::decode(std::span<const std::uint32_t> ids) const {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    TIDAL_CHECK(ids[i] < token_bytes_.size() && !token_bytes_[ids[i]].empty(),
                "decode: id {} at position {} is not in the vocabulary (vocab_size {})", ids[i], i, vocab_size_);
    out += token_bytes_[ids[i]];
  }
  return out;
}

std::string_view BpeTokenizer::bytes_of(std::uint32_t id) const {
  TIDAL_CHECK(id < token_bytes_.size() && !token_bytes_[id].empty(), "id {} is not in the vocabulary (vocab_size {})",
              id, vocab_size_);
  return token_bytes_[id];
}

std::optional<std::uint32_t> BpeTokenizer::token_id(std::string_view token) const {
  const auto it = token_ids_.find(std::string(token));
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

// Before a '\n' next to a printable ASCII character the pre-tokenizer cuts whether or not the text
// goes on. Printable before it: the '\n' starts a white-space run, and the piece before it ends
// there. Printable after it (and no added token starting there, which would end the stretch with
// the run): the '\n' ends a run, and `\s+(?!\S)` leaves it out of the run's piece (it is then a
// piece of its own) exactly as the end of the text would. An added-token match crosses the cut
// only if a token holds a '\n' after its first byte or strips white space; a prefix space or a
// pre-tokenizer without the pattern would change the second half.
std::size_t BpeTokenizer::split_point(std::string_view text, std::size_t from) const {
  if (!splittable_) return std::string_view::npos;
  auto printable = [&](std::size_t i) { return i < text.size() && text[i] > 0x20 && text[i] < 0x7F; };
  auto starts_added = [&](std::size_t i) {
    const auto b = static_cast<unsigned char>(text[i]);
    return added_[0].first_byte[b] || added_[1].first_byte[b];
  };
  for (std::size_t p = std::max<std::size_t>(from, 1); p < text.size(); ++p) {
    const void* newline = std::memchr(text.data() + p, '\n', text.size() - p);
    if (!newline) break;
    p = std::size_t(static_cast<const char*>(newline) - text.data());
    if (printable(p - 1) || (printable(p + 1) && !starts_added(p + 1))) return p;
  }
  return std::string_view::npos;
}

}  // namespace tidal::data
