#include "nn/tp/split_norm.h"

#include "nn/context.h"
#include "ops/cast.h"

namespace tidal::nn::tp {

SplitNorm::SplitNorm(const FeatureSplit& split, std::int64_t features, float eps, bool centered)
    : split_(split), options_{.centered = centered, .full = features, .eps = eps} {
  const std::int64_t local = split.part(features, "model.n_embd");
  weight_ = &add_parameter("weight", {local}, ParameterInit::ones());
  split.place_last(*weight_);
  if (centered) {
    bias_ = &add_parameter("bias", {local}, ParameterInit::zeros());
    split.place_last(*bias_);
  }
}

// The ops run in fp32: bf16 / fp16 activations and parameters are widened on the way in, and y,
// dx and the gradients rounded once on the way out.
Tensor SplitNorm::forward(const Tensor& x_given, Context& ctx) {
  const Tensor x = ctx.as(x_given, DType::f32);
  const Tensor weight = ctx.as(weight_->data, DType::f32);
  const Tensor bias = bias_ != nullptr ? ctx.as(bias_->data, DType::f32) : Tensor();
  Tensor stats = ctx.empty({x.numel() / weight_->shape[0], 2});
  ops::split_norm_sums(stats, x, options_);
  split_.group->all_reduce(stats)->wait();  // the whole row's sums
  Tensor y = ctx.empty(x.shape());
  ops::split_norm_forward(y, stats, x, weight, bias, options_);
  ctx.saved = {x, stats};
  return ctx.as(y, x_given.dtype());
}

Tensor SplitNorm::backward(const Tensor& dy_given, Context& ctx) {
  const Tensor dy = ctx.as(dy_given, DType::f32);
  const Tensor weight = ctx.as(weight_->data, DType::f32);
  const Tensor &x = ctx.saved.at(0), &stats = ctx.saved.at(1);
  // The gradients accumulate in fp32 and are rounded into the parameters' once.
  Tensor grad_w = gradient_or_scratch(*weight_, ctx), dweight = ctx.as(grad_w, DType::f32);
  Tensor grad_b = bias_ != nullptr ? gradient_or_scratch(*bias_, ctx) : Tensor();
  Tensor dbias = bias_ != nullptr ? ctx.as(grad_b, DType::f32) : Tensor();
  ops::split_norm_weight_grads(dweight, dbias, dy, x, stats);
  if (dweight.raw() != grad_w.raw()) ops::cast(grad_w, dweight);
  if (bias_ != nullptr && dbias.raw() != grad_b.raw()) ops::cast(grad_b, dbias);
  Tensor sums = ctx.empty(stats.shape());
  ops::split_norm_grad_sums(sums, dy, x, stats, weight, options_);
  split_.group->all_reduce(sums)->wait();
  Tensor dx = ctx.empty(dy.shape());
  ops::split_norm_backward(dx, dy, x, stats, weight, sums, options_);
  ctx.saved.clear();
  return ctx.as(dx, dy_given.dtype());
}

}  // namespace tidal::nn::tp
