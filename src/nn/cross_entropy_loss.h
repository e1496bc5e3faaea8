// Mean softmax cross-entropy of logits [..., V] against the batch's targets (nn/loss.h).
#pragma once

#include "nn/loss.h"

namespace tidal::nn {

class CrossEntropyLoss final : public Loss {
 public:
  explicit CrossEntropyLoss(BatchSlice part = {}, std::vector<comm::Communicator*> batch_groups = {})
      : Loss(part, std::move(batch_groups)) {}

  void add_rows(LossSum& total, const Tensor& logits, const Tensor& targets, Context& ctx) override;
  Tensor gradient(float scale, Context& ctx) override;
};

}  // namespace tidal::nn
