// Batches from token sequences: next-token prediction (GPT) or masked-token prediction (BERT,
// 15% of positions: 80% replaced by the mask id vocab-1, 10% by a random token, 10% kept).
//
// Packed documents (data.cross_document_attention = false): a sample spans the documents its
// window of the stream meets, and the batch says where each starts (Batch::positions: each
// token's position in its document, restarting at 0), so attention stays inside a document
// (ops/attention.h) and positions restart; the token that ends a document (its end-of-text id)
// is not trained to predict the next one's first. A window's first token is position 0 even
// inside a document (as Megatron's reset_position_ids does).
#pragma once

#include "data/dataset.h"

#include <vector>

namespace tidal::data {

enum class Objective { causal, masked };

// Whether samples split into documents, and where a stream that records none ends one.
struct Packing {
  bool documents = false;
  std::int32_t eod_id = -1;  // the end-of-text id (kept as its document's last token); -1 = none
};

// A sample: seq_len + 1 tokens and, under Packing::documents, where documents start in it
// (offsets in (0, seq_len], ascending: token t begins one); `trained` says which tokens are
// targets to learn (chat data: the answers; empty: every token).
struct TokenSample {
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> document_starts;
  std::vector<std::uint8_t> trained;  // [seq_len + 1] or empty
};

class TokenDataset : public Dataset {
 public:
  nn::Batch batch(std::int64_t first, std::int64_t count, Split split) const override;

  // Sample `index` of `split`.
  virtual TokenSample sample(std::int64_t index, Split split) const = 0;
  // Its tokens.
  std::vector<std::int32_t> sequence(std::int64_t index, Split split) const { return sample(index, split).tokens; }

 protected:
  TokenDataset(std::int64_t seq_len, std::int64_t vocab, Objective objective, std::uint64_t seed, Packing packing = {})
      : seq_len_(seq_len), vocab_(vocab), objective_(objective), seed_(seed), packing_(packing) {}

  std::int64_t seq_len_, vocab_;
  Objective objective_;
  std::uint64_t seed_;
  Packing packing_;
};

}  // namespace tidal::data
