// Linear: y = x W^T + b over the last dimension (PyTorch's layout, W: [out, in]).
#pragma once

#include "nn/module.h"

namespace tidal::nn {

class Linear final : public Module {
 public:
  Linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init);

  Tensor forward(const Tensor& x, Context& ctx) override;  // x [..., in] -> [..., out]
  Tensor backward(const Tensor& dy, Context& ctx) override;

  Parameter& weight() { return *weight_; }

 private:
  std::int64_t in_, out_;
  Parameter* weight_;  // [out, in]
  Parameter* bias_;    // [out] or null
};

}  // namespace tidal::nn
