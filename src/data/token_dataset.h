// Batches from token sequences: next-token prediction (GPT) or masked-token prediction (BERT,
// 15% of positions: 80% replaced by the mask id vocab-1, 10% by a random token, 10% kept).
#pragma once

#include "data/dataset.h"

#include <vector>

namespace tidal::data {

enum class Objective { causal, masked };

class TokenDataset : public Dataset {
 public:
  nn::Batch batch(std::int64_t first, std::int64_t count, Split split) const override;

  // Sample `index` of `split`: seq_len + 1 tokens.
  virtual std::vector<std::int32_t> sequence(std::int64_t index, Split split) const = 0;

 protected:
  TokenDataset(std::int64_t seq_len, std::int64_t vocab, Objective objective, std::uint64_t seed)
      : seq_len_(seq_len), vocab_(vocab), objective_(objective), seed_(seed) {}

  std::int64_t seq_len_, vocab_;
  Objective objective_;
  std::uint64_t seed_;
};

}  // namespace tidal::data
