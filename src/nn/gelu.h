// GELU (tanh approximation) as a module.
#pragma once

#include "nn/module.h"

namespace tidal::nn {

class Gelu final : public Module {
 public:
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;
};

}  // namespace tidal::nn
