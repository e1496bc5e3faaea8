// The transformer MLP: proj(gelu(fc(x))), GELU in either form, hidden width 4C; fc is an input_linear and proj an
// output_linear of the factory.
#pragma once

#include "nn/gelu.h"
#include "nn/layer_factory.h"

namespace tidal::nn {

class Mlp final : public Module {
 public:
  Mlp(std::int64_t n_embd, std::int64_t hidden, ops::GeluForm activation, ParameterInit init, ParameterInit proj_init,
      LayerFactory& layers);

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  Module* fc_;    // weight [4C, C]
  Gelu* act_;
  Module* proj_;  // weight [C, 4C]
};

}  // namespace tidal::nn
