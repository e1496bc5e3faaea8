#include "nn/rms_norm.h"

#include "ops/cast.h"
#include "ops/rms_norm.h"

namespace tidal::nn {

RmsNorm::RmsNorm(std::int64_t features, float eps)
    : features_(features), eps_(eps), weight_(&add_parameter("weight", {features}, ParameterInit::ones())) {}

Tensor RmsNorm::forward(const Tensor& x, Context& ctx) {
  const std::int64_t rows = x.numel() / features_;
  Tensor y = ctx.empty(x.shape(), x.dtype());
  Tensor rstd = ctx.empty({rows});
  Tensor y2 = y.reshape({rows, features_});
  ops::rms_norm_forward(y2, rstd, x.reshape({rows, features_}), ctx.as(weight_->data, DType::f32), eps_);
  ctx.saved = {x, rstd};
  return y;
}

Tensor RmsNorm::backward(const Tensor& dy, Context& ctx) {
  const Tensor &x = ctx.saved.at(0), &rstd = ctx.saved.at(1);
  const std::int64_t rows = x.numel() / features_;
  Tensor dx = ctx.empty(x.shape(), x.dtype());
  Tensor dx2 = dx.reshape({rows, features_});
  // The op's scale and its gradient are fp32: a bf16 / fp16 parameter (mixed precision's chunks)
  // is widened for it, and its gradient accumulated in fp32 and rounded back once.
  Tensor grad = gradient_or_scratch(*weight_, ctx), dweight = ctx.as(grad, DType::f32);
  ops::rms_norm_backward(dx2, dweight, dy.reshape({rows, features_}), x.reshape({rows, features_}),
                         ctx.as(weight_->data, DType::f32), rstd);
  if (dweight.raw() != grad.raw()) ops::cast(grad, dweight);
  ctx.saved.clear();
  return dx;
}

}  // namespace tidal::nn
