// RMSNorm over the last dimension with a learned scale, no shift (Llama's norm).
#pragma once

#include "nn/module.h"

namespace tidal::nn {

class RmsNorm final : public Module {
 public:
  RmsNorm(std::int64_t features, float eps);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [..., C] -> [..., C]
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  std::int64_t features_;
  float eps_;
  Parameter* weight_;  // [C]
};

}  // namespace tidal::nn
