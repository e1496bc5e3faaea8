// GELU as a module, in either form (ops/gelu.h): tanh (GPT-2) or erf (BERT, ViT).
#pragma once

#include "nn/module.h"
#include "ops/gelu.h"

namespace tidal::nn {

class Gelu final : public Module {
 public:
  explicit Gelu(ops::GeluForm form = ops::GeluForm::tanh) : form_(form) {}
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  ops::GeluForm form_;
};

}  // namespace tidal::nn
