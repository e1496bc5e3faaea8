#include "nn/tp/split_rms_norm.h"

#include "nn/context.h"
#include "ops/cast.h"

#include <cmath>

namespace tidal::nn::tp {

SplitRmsNorm::SplitRmsNorm(const FeatureSplit& split, std::int64_t features, float eps)
    : split_(split), eps_(eps), full_(features) {
  weight_ = &add_parameter("weight", {split.part(features, "model.n_embd")}, ParameterInit::ones());
  split.place_last(*weight_);
}

// fp32 loops on the host, as SplitLayerNorm's: bf16 / fp16 activations and parameters are widened
// on the way in, and y, dx and the gradient rounded once on the way out.
Tensor SplitRmsNorm::forward(const Tensor& x_given, Context& ctx) {
  const Tensor x = on_host(ctx.as(x_given, DType::f32));
  const Tensor weight = on_host(ctx.as(weight_->data, DType::f32));
  const std::int64_t C = weight_->shape[0], rows = x.numel() / C;
  const std::int64_t computed = has_values(x) ? rows : 0;  // none on meta tensors (a planned step)
  const float* px = x.data<float>();
  Tensor squares = Tensor::zeros({rows}, DType::f32, host_side(x_given));  // this rank's features, then the group's
  float* ps = squares.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < computed; ++r) {
    double s2 = 0;
    for (std::int64_t c = 0; c < C; ++c) s2 += double(px[r * C + c]) * px[r * C + c];
    ps[r] = float(s2);
  }
  split_.group->all_reduce(squares)->wait();
  Tensor y = ctx.empty(x.shape()), rstd = Tensor::empty({rows}, DType::f32, host_side(x_given, *ctx.state().activations));
  Tensor y_here = on_host(y, false);
  float *py = y_here.data<float>(), *pr = rstd.data<float>();
  const float* w = weight.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < computed; ++r) {
    pr[r] = float(1.0 / std::sqrt(double(ps[r]) / double(full_) + eps_));
    for (std::int64_t c = 0; c < C; ++c) py[r * C + c] = px[r * C + c] * pr[r] * w[c];
  }
  from_host(y, y_here);
  ctx.saved = {x, rstd};
  return ctx.as(y, x_given.dtype());
}

Tensor SplitRmsNorm::backward(const Tensor& dy_given, Context& ctx) {
  const Tensor dy = on_host(ctx.as(dy_given, DType::f32));
  const Tensor weight = on_host(ctx.as(weight_->data, DType::f32));
  Tensor grad = gradient_or_scratch(*weight_, ctx);
  Tensor dweight = ctx.as(grad, DType::f32);  // accumulates in fp32, rounded once
  Tensor dweight_here = on_host(dweight);
  const Tensor &x = ctx.saved.at(0), &rstd = ctx.saved.at(1);
  const std::int64_t C = weight_->shape[0], rows = x.numel() / C;
  const std::int64_t computed = has_values(x) ? rows : 0;  // none on meta tensors (a planned step)
  const float *pd = dy.data<float>(), *px = x.data<float>(), *pr = rstd.data<float>(), *w = weight.data<float>();
  float* dw = dweight_here.data<float>();
  for (std::int64_t r = 0; r < computed; ++r)
    for (std::int64_t c = 0; c < C; ++c) dw[c] += pd[r * C + c] * px[r * C + c] * pr[r];
  from_host(dweight, dweight_here);
  if (dweight.raw() != grad.raw()) ops::cast(grad, dweight);
  // dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd, the mean over all C features.
  Tensor dots = Tensor::zeros({rows}, DType::f32, host_side(dy_given));
  float* pg = dots.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < computed; ++r) {
    double s = 0;
    for (std::int64_t c = 0; c < C; ++c) s += double(pd[r * C + c]) * w[c] * px[r * C + c] * pr[r];
    pg[r] = float(s);
  }
  split_.group->all_reduce(dots)->wait();
  Tensor dx = ctx.empty(dy.shape());
  Tensor dx_here = on_host(dx, false);
  float* pdx = dx_here.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < computed; ++r) {
    const float mean = pg[r] / float(full_);
    for (std::int64_t c = 0; c < C; ++c)
      pdx[r * C + c] = pr[r] * (pd[r * C + c] * w[c] - px[r * C + c] * pr[r] * mean);
  }
  from_host(dx, dx_here);
  ctx.saved.clear();
  return ctx.as(dx, dy_given.dtype());
}

}  // namespace tidal::nn::tp
