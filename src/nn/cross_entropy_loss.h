// Mean softmax cross-entropy of logits [..., V] against the batch's targets (ignore index -100
// excluded from the mean). forward returns the loss as a [1] tensor; backward takes dloss [1].
#pragma once

#include "nn/module.h"

namespace tidal::nn {

class CrossEntropyLoss final : public Module {
 public:
  Tensor forward(const Tensor& logits, Context& ctx) override;
  Tensor backward(const Tensor& dloss, Context& ctx) override;
};

}  // namespace tidal::nn
