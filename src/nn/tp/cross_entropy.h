// Vocab-parallel cross-entropy (optimus-2d.txt sec. 3.2.2; Megatron-LM): the logits' classes are
// split over a tensor group (rank r holds classes [r V'/p, (r+1) V'/p) of the padded vocabulary
// V' >= V; the padding's logits are left out), and the loss is computed
// without gathering them. Each rank's log-sum-exp over its classes is combined into the global
// one (all-reduce max, then sum of exp), the target logit comes from the rank that holds it (an
// all-reduce sum), and backward is softmax(global) - onehot on each rank's own classes. Three
// all-reduces of one value per row instead of an all-gather of [rows, V].
//
// In a 2D / 2.5D grid the samples are split too: each rank takes its samples' targets, and the
// loss sum and target count are summed over the `batch_groups` (the ranks with other samples),
// so the mean is over the replica's whole micro-batch.
#pragma once

#include "comm/communicator.h"
#include "nn/loss.h"

#include <vector>

namespace tidal::nn::tp {

class VocabParallelCrossEntropy final : public Loss {
 public:
  // `classes` is the number of classes V, `padded` the V' >= V the logits are split from
  // (divisible by the group size; padded_vocab in nn/tp/embedding.h).
  VocabParallelCrossEntropy(std::int64_t classes, std::int64_t padded, comm::Communicator& group,
                            BatchSlice samples = {}, std::vector<comm::Communicator*> batch_groups = {});

  // logits [..., V'/p] (this rank's classes); targets global class ids, or kIgnoreIndex. The
  // sum is the rows' whole loss, equal on every rank of the group (three all-reduces over it).
  // The gradient of the padding's logits is zero.
  void add_rows(LossSum& total, const Tensor& logits, const Tensor& targets, Context& ctx) override;
  Tensor gradient(float scale, Context& ctx) override;

 private:
  comm::Communicator& group_;
  std::int64_t classes_, local_, first_;
  std::int64_t real_;  // this rank's classes below V (local_, fewer where the padding starts)
};

}  // namespace tidal::nn::tp
