// The transformer MLP: proj(gelu(fc(x))), hidden width 4C.
#pragma once

#include "nn/gelu.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace tidal::nn {

class Mlp final : public Module {
 public:
  Mlp(std::int64_t n_embd, std::int64_t hidden, ParameterInit init, ParameterInit proj_init);

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  Linear* fc_;    // weight [4C, C]
  Gelu* act_;
  Linear* proj_;  // weight [C, 4C]
};

}  // namespace tidal::nn
