// A byte-level BPE tokenizer (GPT-2 style) read from a Hugging Face tokenizer.json. encode() gives
// exactly the ids of `tokenizers`' Tokenizer.from_file(path).encode(text).ids: added tokens are
// split out first (leftmost-longest; those with normalized=false before those with normalized=true),
// every other stretch is cut into pieces by GPT-2's pattern (data/gpt2_pretokenizer.h scans for it)
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (Unicode letters, numbers and White_Space from ICU), and each piece's bytes are merged by merge
// rank, lowest first and leftmost among equals. decode() gives the bytes back. The character
// classes are ICU's (Unicode 15 with Debian's ICU 72), `tokenizers`' are Oniguruma's: a code point
// first assigned in between (rare scripts, Unicode 15's CJK additions) may class differently.
// Invariants: the tokenizer is immutable once read, so encode() may run on many threads at once;
// each thread keeps its own cache of encoded pieces, tagged with the tokenizer it belongs to.
// Anything in the file that would make encode() differ from `tokenizers` (another model type, a
// normalizer, BPE dropout, a post-processor that adds tokens, ...) is refused when it is read.
#pragma once

#include "core/error.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tidal::data {

// encode() of text that is not UTF-8; offset() is the first bad byte's offset in that text.
class InvalidUtf8 : public Error {
 public:
  explicit InvalidUtf8(std::size_t offset);
  std::size_t offset() const { return offset_; }

 private:
  std::size_t offset_;
};

// How tokenizer.json spells byte `b` in a byte-level vocabulary (GPT-2's map: printable Latin-1
// as itself, the other 68 bytes as U+0100 onwards), in UTF-8: "Ġ" for a space.
std::string byte_level_spelling(unsigned char b);

class BpeTokenizer {
 public:
  // Reads a tokenizer.json; every problem is a tidal::Error naming the file and the key.
  static BpeTokenizer from_file(const std::string& tokenizer_json);

  // The ids of UTF-8 text (anything else throws InvalidUtf8).
  std::vector<std::uint32_t> encode(std::string_view text) const;
  // Appends the ids of `text` to `out` (encode() without the allocation).
  void encode_into(std::string_view text, std::vector<std::uint32_t>& out) const;
  // The bytes of the ids, added tokens as their content. An id outside the vocabulary is an error.
  std::string decode(std::span<const std::uint32_t> ids) const;

  // The bytes of one id (an added token's content), as decode() gives them; an id outside the
  // vocabulary is an error.
  std::string_view bytes_of(std::uint32_t id) const;

  // Largest id + 1 over the vocabulary and the added tokens.
  std::uint32_t vocab_size() const { return vocab_size_; }
  // The id of a token as tokenizer.json spells it (a vocabulary key such as "Ġthe", or an added
  // token's content).
  std::optional<std::uint32_t> token_id(std::string_view token) const;
  // The id of "<|endoftext|>", if the tokenizer has it.
  std::optional<std::uint32_t> eot_id() const { return token_id("<|endoftext|>"); }

  // The first offset p >= from (from >= 1) at which encode(text[..p]) + encode(text[p..]) ==
  // encode(text) holds for certain (before a '\n' beside a printable ASCII character), or npos
  // when there is none or this tokenizer's configuration allows no such cut. Lets one long
  // document be encoded in parallel pieces.
  std::size_t split_point(std::string_view text, std::size_t from) const;

 private:
  struct AddedToken {
    std::string content;
    std::uint32_t id;
    bool lstrip, rstrip;
  };
  // Added tokens matched in one pass, longest first; `first_byte` marks the bytes they start with,
  // `only_first` is that byte when they all start with the same one (found with memchr), else -1.
  struct AddedPass {
    std::vector<AddedToken> tokens;
    std::array<bool, 256> first_byte{};
    int only_first = -1;
  };
  struct Merge {
    std::uint64_t pair;  // left id << 32 | right id; kNoPair in an empty slot
    std::uint32_t rank, id;
  };
  static constexpr std::uint64_t kNoPair = ~std::uint64_t(0);

  BpeTokenizer() = default;
  static BpeTokenizer from_json(const nlohmann::json& root, const std::string& path);
  void read_vocab(const nlohmann::json& model, const std::string& path);
  void read_merges(const nlohmann::json& model, const std::string& path);
  void read_added_tokens(const nlohmann::json& root, const std::string& path);
  void encode_segment(std::string_view segment, std::vector<std::uint32_t>& out) const;
  void encode_pieces(std::string_view segment, std::vector<std::uint32_t>& out) const;
  void encode_word(std::string_view word, std::vector<std::uint32_t>& out) const;
  void merge_word(std::string_view word, std::vector<std::uint32_t>& out) const;
  void split_added(std::string_view text, int pass, std::vector<std::uint32_t>& out) const;
  const Merge* find_merge(std::uint32_t left, std::uint32_t right) const;

  std::uint64_t serial_ = 0;  // names this tokenizer's entries in the per-thread piece caches
  std::uint32_t vocab_size_ = 0;
  std::vector<std::string> token_bytes_;                      // [vocab_size]: bytes of each id
  std::unordered_map<std::string, std::uint32_t> token_ids_;  // tokenizer.json spelling -> id
  std::unordered_map<std::string, std::uint32_t> word_ids_;   // bytes of a vocabulary token -> id
  std::array<std::int64_t, 256> byte_ids_{};                  // id of each single byte, -1 if none
  std::vector<Merge> merges_;                                 // open addressing by pair
  std::vector<Merge> byte_pair_merges_;                       // [256 * 256] by two bytes, if all have ids
  std::array<AddedPass, 2> added_;  // [0]: normalized=false (matched first), [1]: normalized=true
  std::optional<std::uint32_t> unk_id_;
  bool fuse_unk_ = false, ignore_merges_ = false, add_prefix_space_ = false, use_regex_ = true;
  bool splittable_ = false;  // split_point() may cut: see there
};

}  // namespace tidal::data
