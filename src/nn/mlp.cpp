#include "nn/mlp.h"

namespace tidal::nn {
namespace {
enum Slot : std::size_t { kFc, kAct, kProj };
}

Mlp::Mlp(std::int64_t n_embd, std::int64_t hidden, ops::GeluForm activation, ParameterInit init, ParameterInit proj_init,
         LayerFactory& layers)
    : fc_(&add_module("fc", layers.input_linear(n_embd, hidden, true, init))),
      act_(&add_module("act", std::make_unique<Gelu>(activation))),
      proj_(&add_module("proj", layers.output_linear(hidden, n_embd, true, proj_init))) {}

Tensor Mlp::forward(const Tensor& x, Context& ctx) {
  return ctx.forward(*proj_, ctx.forward(*act_, ctx.forward(*fc_, x, kFc), kAct), kProj);
}

Tensor Mlp::backward(const Tensor& dy, Context& ctx) {
  return ctx.backward(*fc_, ctx.backward(*act_, ctx.backward(*proj_, dy, kProj), kAct), kFc);
}

}  // namespace tidal::nn
