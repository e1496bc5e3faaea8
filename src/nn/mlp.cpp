#include "nn/mlp.h"

#include "nn/gelu.h"
#include "nn/swiglu.h"

namespace tidal::nn {
namespace {
enum MlpSlot : std::size_t { kFc, kAct, kProj };
}

Mlp::Mlp(std::int64_t n_embd, const MlpConfig& c, ParameterInit init, ParameterInit proj_init, LayerFactory& layers)
    : recompute_activation_(c.recompute_activation) {
  const std::int64_t hidden = c.hidden ? c.hidden : 4 * n_embd;
  const bool glu = c.kind == MlpConfig::Kind::swiglu;
  fc_ = &add_module("fc", layers.input_linear(n_embd, glu ? 2 * hidden : hidden, c.bias, init, glu ? 2 : 1));
  if (glu) act_ = &add_module("act", std::make_unique<SwiGlu>());
  else act_ = &add_module("act", std::make_unique<Gelu>(c.activation));
  proj_ = &add_module("proj", layers.output_linear(hidden, n_embd, c.bias, proj_init));
}

Tensor Mlp::forward(const Tensor& x, Context& ctx) {
  const Tensor h = ctx.forward(*fc_, x, kFc);
  const Tensor a = ctx.forward(*act_, h, kAct);
  Tensor y = ctx.forward(*proj_, a, kProj);
  // The activation keeps h for its backward anyway: holding it here too costs nothing. (Outside
  // training the children have kept nothing, so there is nothing to forget.)
  if (recompute_activation_ && ctx.forget(a) > 0) ctx.saved = {h};
  return y;
}

Tensor Mlp::backward(const Tensor& dy, Context& ctx) {
  if (!ctx.saved.empty()) {  // remade through the runner, as activation checkpointing remakes a block
    ctx.remember(ctx.forward(*act_, ctx.saved.at(0), kAct));
    ctx.saved.clear();
  }
  return ctx.backward(*fc_, ctx.backward(*act_, ctx.backward(*proj_, dy, kProj), kAct), kFc);
}

}  // namespace tidal::nn
