#include "nn/gelu.h"

#include "ops/gelu.h"

namespace tidal::nn {

Tensor Gelu::forward(const Tensor& x, Context& ctx) {
  Tensor y = ctx.empty(x.shape(), x.dtype());
  ops::gelu_forward(y, x, form_);
  ctx.saved = {x};
  return y;
}

Tensor Gelu::backward(const Tensor& dy, Context& ctx) {
  const Tensor& x = ctx.saved.at(0);
  Tensor dx = ctx.empty(x.shape(), x.dtype());
  ops::gelu_backward(dx, dy, x, form_);
  ctx.saved.clear();
  return dx;
}

}  // namespace tidal::nn
