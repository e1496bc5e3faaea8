// Chat data (data.kind = "chat"): a JSON-lines file of conversations, {"messages": [{"role":
// "system" | "user" | "assistant", "content": "..."}, ...]} a line, rendered with a chat template
// (data/chat_template.h) and tokenized with the model's tokenizer (data.tokenizer). Only the
// answers are trained: a token is a target when it starts inside an assistant turn's answer, so
// a sample's other targets are ignored (-100, as transformers' labels). Conversations are packed
// whole into sequences of model.seq_len + 1 tokens, each into the first of the 64 newest
// sequences with room for it, else a new one (first fit: near file order, little padding; the
// rest of a sequence is padding, ignored), each one a document: attention stays inside it and
// positions restart (data/token_dataset.h). A conversation
// longer than a sequence is cut to its first seq_len + 1 tokens; one with nothing to train in
// them is left out. Sequences are then read as token windows are: shuffled per epoch, the last
// 1/20 held out for evaluation unless data.eval_path names another file.
//
// Opening reads and tokenizes the file once (its problems are errors naming the line) and keeps
// 24 bytes a conversation; a sample parses, renders and tokenizes its conversations again from
// the mapped file.
#pragma once

#include "data/bpe_tokenizer.h"
#include "data/chat_template.h"
#include "data/token_dataset.h"
#include "io/mapped_file.h"

#include <optional>
#include <string>
#include <vector>

namespace tidal::data {

struct ChatOptions {
  std::string tokenizer;                     // a tokenizer.json with the template's special tokens
  std::optional<ChatTemplate> chat_template;  // nullopt: the tokenizer directory's tokenizer_config.json's
};

class ChatDataset final : public TokenDataset {
 public:
  // `key` names the file in errors (data.path, data.eval_path); `hold_out_eval` as StreamDataset's.
  ChatDataset(const std::string& path, const std::string& key, const ChatOptions& chat, bool hold_out_eval,
              std::int64_t seq_len, std::int64_t vocab, std::uint64_t seed);

  TokenSample sample(std::int64_t index, Split split) const override;
  std::string describe() const override;
  std::vector<std::int64_t> sample_ids(std::int64_t first, std::int64_t count) const override;

  // The packed sequence `s` (in file order; sample() reads them shuffled or held out).
  TokenSample sequence_at(std::int64_t s) const;  // its conversations in file order
  std::int64_t sequences() const { return std::int64_t(first_.size()) - 1; }
  ChatTemplate chat_template() const { return template_; }

 private:
  struct Encoded {
    std::vector<std::int32_t> tokens;
    std::vector<std::uint8_t> trained;  // [tokens]: the token starts inside an answer
  };
  struct Line {
    std::uint64_t begin;  // byte offset in the file
    std::uint32_t bytes, number;
  };
  std::vector<ChatMessage> parse(const Line& line) const;
  Encoded encode(const Line& line) const;
  std::int64_t sequence(std::int64_t index, Split split) const;

  io::MappedFile file_;
  std::string source_;
  BpeTokenizer tokenizer_;
  ChatTemplate template_;
  std::int32_t padding_id_;                  // the end-of-turn token, never a target
  std::vector<Line> kept_;                   // the conversations packed, in file order
  std::vector<std::int64_t> first_;          // [sequences + 1]: each sequence's first of kept_
  std::int64_t conversations_ = 0;
  std::int64_t train_sequences_ = 0, eval_sequences_ = 0, eval_first_ = 0;
  std::int64_t truncated_ = 0, answered_tokens_ = 0, packed_tokens_ = 0;
  bool held_out_;
};

}  // namespace tidal::data
