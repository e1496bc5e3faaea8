// Vocab-parallel embedding (Megatron-LM; optimus-2d.txt sec. 3.2.2): the table's rows are split
// over a tensor group (rank r holds ids [r V'/p, (r+1) V'/p), V' = padded_vocab(V, p)); each
// rank looks up the ids it holds
// (zero rows for the others) and reduce_from_group sums the partial outputs. Backward adds each
// rank's rows only. With a head tied to this table, each rank's logits are its own classes, as
// VocabParallelCrossEntropy expects.
#pragma once

#include "comm/communicator.h"
#include "nn/embedding.h"

namespace tidal::nn::tp {

// A vocabulary of `n` ids padded up to a multiple of `parts`, so that it splits into equal blocks
// (Megatron-LM pads GPT-2's 50257 the same way). The padding rows of the table are zeros that no
// id looks up and no checkpoint holds; their logits are left out of the cross-entropy.
constexpr std::int64_t padded_vocab(std::int64_t n, std::int64_t parts) { return (n + parts - 1) / parts * parts; }

// ids re-based to the rows [first, first + count) of a [vocab, ...] table; ids in other rows
// become ops::kIdElsewhere (a zero row). Ids outside [0, vocab) are an error naming the key.
Tensor localize_ids(const Tensor& ids, std::int64_t first, std::int64_t count, std::int64_t vocab);

class VocabParallelEmbedding final : public TableLookup {
 public:
  VocabParallelEmbedding(std::int64_t num, std::int64_t dim, ParameterInit init, comm::Communicator& group);

  Tensor forward(const Tensor& ids, Context& ctx) override;  // ids [B, T] (global) -> [B, T, C]
  Tensor backward(const Tensor& dy, Context& ctx) override;

  Parameter& table() override { return *table_; }

 private:
  comm::Communicator& group_;
  std::int64_t local_, first_;
  Parameter* table_;  // [V'/p, C], rows first_.. of [V, C] (and of the padding)
};

}  // namespace tidal::nn::tp
