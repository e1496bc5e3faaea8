#include "nn/layernorm.h"

#include "ops/layernorm.h"

namespace tidal::nn {

LayerNorm::LayerNorm(std::int64_t features, float eps)
    : features_(features), eps_(eps), weight_(&add_parameter("weight", {features}, ParameterInit::ones())),
      bias_(&add_parameter("bias", {features}, ParameterInit::zeros())) {}

Tensor LayerNorm::forward(const Tensor& x, Context& ctx) {
  const std::int64_t rows = x.numel() / features_;
  Tensor y = ctx.empty(x.shape(), x.dtype());
  Tensor mean = ctx.empty({rows}), rstd = ctx.empty({rows});
  Tensor x2 = x.reshape({rows, features_}), y2 = y.reshape({rows, features_});
  ops::layernorm_forward(y2, mean, rstd, x2, weight_->data, bias_->data, eps_);
  ctx.saved = {x, mean, rstd};
  return y;
}

Tensor LayerNorm::backward(const Tensor& dy, Context& ctx) {
  const Tensor &x = ctx.saved.at(0), &mean = ctx.saved.at(1), &rstd = ctx.saved.at(2);
  const std::int64_t rows = x.numel() / features_;
  Tensor dx = ctx.empty(x.shape(), x.dtype());
  Tensor dx2 = dx.reshape({rows, features_});
  Tensor dweight = gradient_or_scratch(*weight_, ctx), dbias = gradient_or_scratch(*bias_, ctx);
  ops::layernorm_backward(dx2, dweight, dbias, dy.reshape({rows, features_}), x.reshape({rows, features_}),
                          weight_->data, mean, rstd);
  ctx.saved.clear();
  return dx;
}

}  // namespace tidal::nn
