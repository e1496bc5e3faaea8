#include "nn/mlp.h"

#include "nn/gelu.h"
#include "nn/swiglu.h"

namespace tidal::nn {
namespace {
enum Slot : std::size_t { kFc, kAct, kProj };
}

Mlp::Mlp(std::int64_t n_embd, const MlpConfig& c, ParameterInit init, ParameterInit proj_init, LayerFactory& layers) {
  const std::int64_t hidden = c.hidden ? c.hidden : 4 * n_embd;
  const bool glu = c.kind == MlpConfig::Kind::swiglu;
  fc_ = &add_module("fc", layers.input_linear(n_embd, glu ? 2 * hidden : hidden, c.bias, init, glu ? 2 : 1));
  if (glu) act_ = &add_module("act", std::make_unique<SwiGlu>());
  else act_ = &add_module("act", std::make_unique<Gelu>(c.activation));
  proj_ = &add_module("proj", layers.output_linear(hidden, n_embd, c.bias, proj_init));
}

Tensor Mlp::forward(const Tensor& x, Context& ctx) {
  return ctx.forward(*proj_, ctx.forward(*act_, ctx.forward(*fc_, x, kFc), kAct), kProj);
}

Tensor Mlp::backward(const Tensor& dy, Context& ctx) {
  return ctx.backward(*fc_, ctx.backward(*act_, ctx.backward(*proj_, dy, kProj), kAct), kFc);
}

}  // namespace tidal::nn
