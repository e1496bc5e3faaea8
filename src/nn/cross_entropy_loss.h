// Mean softmax cross-entropy of logits [..., V] against the batch's targets (ignore index -100
// excluded from the mean). forward returns the loss as a [1] tensor; backward takes dloss [1].
//
// A rank holding part of the batch (a sequence-parallel rank's positions) takes its part of the
// targets, and sums the loss and the target count over `batch_groups` (the ranks holding the
// other parts), so the mean is over the replica's whole micro-batch, equal on each of them.
#pragma once

#include "comm/communicator.h"
#include "nn/batch_slice.h"
#include "nn/module.h"

#include <vector>

namespace tidal::nn {

// Targets of a batch that count in the loss (not the ignore index): a micro-batch's mean loss
// weighs this much in the step's.
std::int64_t valid_targets(const Batch& batch);

class CrossEntropyLoss final : public Module {
 public:
  explicit CrossEntropyLoss(BatchSlice part = {}, std::vector<comm::Communicator*> batch_groups = {})
      : part_(part), batch_groups_(std::move(batch_groups)) {}

  Tensor forward(const Tensor& logits, Context& ctx) override;
  Tensor backward(const Tensor& dloss, Context& ctx) override;

 private:
  BatchSlice part_;
  std::vector<comm::Communicator*> batch_groups_;
};

}  // namespace tidal::nn
