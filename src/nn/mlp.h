// The transformer MLP, in two kinds: proj(gelu(fc(x))) (GPT-2, BERT, ViT; GELU in either form)
// and SwiGLU's proj(silu(gate(x)) * up(x)) (Llama), where fc is one input_linear making
// [gate | up] as two segments, so a split by features gives each rank its block of both. fc is
// an input_linear and proj an output_linear of the factory.
#pragma once

#include "nn/layer_factory.h"
#include "ops/gelu.h"

namespace tidal::nn {

struct MlpConfig {
  enum class Kind { gelu, swiglu };
  Kind kind = Kind::gelu;
  std::int64_t hidden = 0;  // the hidden width I; 0 = 4 n_embd
  ops::GeluForm activation = ops::GeluForm::tanh;  // gelu's form
  bool bias = true;
  // Selective recomputation: the activation's output (the projection's input, [.., I]) is let go
  // after forward and remade from the activation's input in backward.
  bool recompute_activation = false;
};

class Mlp final : public Module {
 public:
  Mlp(std::int64_t n_embd, const MlpConfig& cfg, ParameterInit init, ParameterInit proj_init, LayerFactory& layers);

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  Module* fc_;    // weight [I, C], or [2I, C] (gate | up)
  Module* act_;
  Module* proj_;  // weight [C, I]
  bool recompute_activation_;
};

}  // namespace tidal::nn
