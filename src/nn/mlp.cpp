#include "nn/mlp.h"

namespace tidal::nn {
namespace {
enum Slot : std::size_t { kFc, kAct, kProj };
}

Mlp::Mlp(std::int64_t n_embd, std::int64_t hidden, ParameterInit init, ParameterInit proj_init)
    : fc_(&add_module("fc", std::make_unique<Linear>(n_embd, hidden, true, init))),
      act_(&add_module("act", std::make_unique<Gelu>())),
      proj_(&add_module("proj", std::make_unique<Linear>(hidden, n_embd, true, proj_init))) {}

Tensor Mlp::forward(const Tensor& x, Context& ctx) {
  return ctx.forward(*proj_, ctx.forward(*act_, ctx.forward(*fc_, x, kFc), kAct), kProj);
}

Tensor Mlp::backward(const Tensor& dy, Context& ctx) {
  return ctx.backward(*fc_, ctx.backward(*act_, ctx.backward(*proj_, dy, kProj), kAct), kFc);
}

}  // namespace tidal::nn
