// LayerNorm over the last dimension with learned scale and shift.
#pragma once

#include "nn/module.h"

namespace tidal::nn {

class LayerNorm final : public Module {
 public:
  LayerNorm(std::int64_t features, float eps);

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  std::int64_t features_;
  float eps_;
  Parameter* weight_;  // [C]
  Parameter* bias_;    // [C]
};

}  // namespace tidal::nn
