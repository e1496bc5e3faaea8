#include "data/token_dataset.h"

#include "core/philox.h"
#include "ops/cross_entropy.h"

namespace tidal::data {

namespace {

// Positions in documents of one sample's [seq_len] tokens (TokenSample::document_starts) and,
// for next-token prediction, no target across a document's end.
void pack_documents(std::int32_t* pos, std::int32_t* tgt, const std::vector<std::int64_t>& starts,
                    std::int64_t seq_len, Objective objective) {
  std::size_t next = 0;
  std::int32_t p = 0;
  for (std::int64_t t = 0; t < seq_len; ++t) {
    if (next < starts.size() && starts[next] == t) {
      p = 0;
      ++next;
    }
    pos[t] = p++;
    // Token t ends its document: its target is the next document's first token.
    if (objective == Objective::causal && next < starts.size() && starts[next] == t + 1) tgt[t] = ops::kIgnoreIndex;
  }
}

}  // namespace

nn::Batch TokenDataset::batch(std::int64_t first, std::int64_t count, Split split) const {
  nn::Batch b{.tokens = Tensor::empty({count, seq_len_}, DType::i32), .targets = Tensor::empty({count, seq_len_}, DType::i32)};
  if (packing_.documents) b.positions = Tensor::empty({count, seq_len_}, DType::i32);
  std::int32_t* tok = b.tokens.data<std::int32_t>();
  std::int32_t* tgt = b.targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < count; ++i) {
    const TokenSample s = sample(first + i, split);
    const std::vector<std::int32_t>& seq = s.tokens;
    for (std::int64_t t = 0; t < seq_len_; ++t) {
      const std::int64_t k = i * seq_len_ + t;
      if (objective_ == Objective::causal) {
        tok[k] = seq[std::size_t(t)];
        tgt[k] = s.trained.empty() || s.trained[std::size_t(t + 1)] ? seq[std::size_t(t + 1)] : ops::kIgnoreIndex;
        continue;
      }
      const std::uint64_t index = std::uint64_t(first + i);
      const PhiloxCounter r = philox4x32({std::uint32_t(index), std::uint32_t(index >> 32), std::uint32_t(t),
                                          split == Split::train ? 0u : 1u},
                                         {std::uint32_t(seed_), 0x6d6c6du});
      const std::int32_t x = seq[std::size_t(t)];
      if (uniform01(r[0]) >= 0.15f) {
        tok[k] = x;
        tgt[k] = ops::kIgnoreIndex;
        continue;
      }
      const float how = uniform01(r[1]);
      tok[k] = how < 0.8f ? std::int32_t(vocab_ - 1) : how < 0.9f ? std::int32_t(r[2] % std::uint32_t(vocab_ - 1)) : x;
      tgt[k] = x;
    }
    if (packing_.documents)
      pack_documents(b.positions.data<std::int32_t>() + i * seq_len_, tgt + i * seq_len_, s.document_starts, seq_len_,
                     objective_);
  }
  return b;
}

}  // namespace tidal::data
