#include "nn/swiglu.h"

#include "ops/swiglu.h"

namespace tidal::nn {

Tensor SwiGlu::forward(const Tensor& gate_up, Context& ctx) {
  const std::int64_t width = gate_up.dim(-1), rows = gate_up.numel() / width;
  Tensor y = ctx.empty(gate_up.shape().with_last(width / 2), gate_up.dtype());
  Tensor y2 = y.reshape({rows, width / 2});
  ops::swiglu_forward(y2, gate_up.reshape({rows, width}));
  ctx.saved = {gate_up};
  return y;
}

Tensor SwiGlu::backward(const Tensor& dy, Context& ctx) {
  const Tensor& gate_up = ctx.saved.at(0);
  const std::int64_t width = gate_up.dim(-1), rows = gate_up.numel() / width;
  Tensor dgate_up = ctx.empty(gate_up.shape(), gate_up.dtype());
  Tensor d2 = dgate_up.reshape({rows, width});
  ops::swiglu_backward(d2, dy.reshape({rows, width / 2}), gate_up.reshape({rows, width}));
  ctx.saved.clear();
  return dgate_up;
}

}  // namespace tidal::nn
