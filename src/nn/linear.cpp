#include "nn/linear.h"

#include "core/gpu.h"
#include "ops/bias.h"
#include "ops/gemm.h"

namespace tidal::nn {
Tensor linear_weight(const Parameter& weight, DType dtype) {
  if (!weight.nf4) return weight.data;
  // A temporary of the step (its memory's peak counts it) where the step's memory is the codes'.
  const Device device = weight.nf4->codes.device();
  Allocator& step = default_allocator();
  Tensor w = Tensor::empty(weight.shape, dtype, step.device() == device ? step : allocator_on(device));
  ops::nf4_dequantize(w, *weight.nf4);
  return w;
}

void linear_forward(Tensor& y2, const Tensor& x2, const Parameter& weight, const Parameter* bias) {
  ops::gemm(y2, x2, linear_weight(weight, x2.dtype()), {.trans_b = true, .bias = bias ? &bias->data : nullptr});
}

void linear_backward(Tensor& dx2, const Tensor& dy2, const Tensor& x2, Parameter& weight, Parameter* bias) {
  ops::gemm(dx2, dy2, linear_weight(weight, dy2.dtype()));                              // dx = dy W
  if (!weight.frozen) ops::gemm(weight.grad, dy2, x2, {.trans_a = true, .beta = 1.0f});  // dW += dy^T x
  if (bias && !bias->frozen) ops::bias_grad(bias->grad, dy2);
}

Linear::Linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init)
    : in_(in), out_(out), weight_(&add_parameter("weight", {out, in}, init)),
      bias_(bias ? &add_parameter("bias", {out}, ParameterInit::zeros()) : nullptr) {}

Tensor Linear::forward(const Tensor& x, Context& ctx) {
  TIDAL_ASSERT(x.dim(-1) == in_, "{}: input {} for {} features", path(), x.str(), in_);
  Tensor y = ctx.empty(x.shape().with_last(out_), x.dtype());
  Tensor y2 = y.reshape({-1, out_});
  linear_forward(y2, x.reshape({-1, in_}), *weight_, bias_);
  ctx.saved = {x};
  return y;
}

Tensor Linear::backward(const Tensor& dy, Context& ctx) {
  const Tensor& x = ctx.saved.at(0);
  Tensor x2 = x.reshape({-1, in_}), dy2 = dy.reshape({-1, out_});
  Tensor dx = ctx.empty(x.shape(), x.dtype());
  Tensor dx2 = dx.reshape({-1, in_});
  linear_backward(dx2, dy2, x2, *weight_, bias_);
  ctx.saved.clear();
  return dx;
}

}  // namespace tidal::nn
