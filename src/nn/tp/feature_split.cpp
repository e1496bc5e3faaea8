#include "nn/tp/feature_split.h"

#include "core/error.h"
#include "nn/context.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/tp/mappings.h"
#include "nn/tp/split_rms_norm.h"
#include "ops/cast.h"

#include <algorithm>
#include <cmath>

namespace tidal::nn::tp {

std::int64_t FeatureSplit::part(std::int64_t n, const char* key) const {
  TIDAL_CHECK(n % parts() == 0, "{} ({}) does not split into the {} feature blocks of tensor group '{}'", key, n,
              parts(), group->name());
  return n / parts();
}

void FeatureSplit::place_last(Parameter& p) const {
  const std::size_t last = p.shape.size() - 1;
  p.full_shape = p.shape;
  p.full_shape[last] = p.shape[last] * parts();
  p.offset = Shape(std::vector<std::int64_t>(p.shape.size(), 0));
  p.offset[last] = index() * p.shape[last];
  p.copies = copies;
  p.replicas = replicas;
}

void FeatureSplit::split_last(Parameter& p) const {
  const std::size_t last = p.shape.size() - 1;
  p.shape[last] = part(p.shape[last], "model.n_embd");
  place_last(p);
}

SplitEmbedding::SplitEmbedding(const FeatureSplit& split, BatchSlice samples, std::int64_t num, std::int64_t dim,
                               ParameterInit init)
    : samples_(samples), inner_(&add_module("", std::make_unique<Embedding>(num, split.part(dim, "model.n_embd"), init))) {
  split.place_last(inner_->table());
}

Parameter& SplitEmbedding::table() { return inner_->table(); }

Tensor SplitEmbedding::forward(const Tensor& ids, Context& ctx) {
  return ctx.forward(*inner_, samples_.of(ids).clone(), 0);
}

Tensor SplitEmbedding::backward(const Tensor& dy, Context& ctx) { return ctx.backward(*inner_, dy, 0); }

std::unique_ptr<TableLookup> SplitLayers::embedding(std::int64_t num, std::int64_t dim, ParameterInit init) {
  return std::make_unique<SplitEmbedding>(hidden_, hidden_samples_, num, dim, init);
}

std::unique_ptr<Module> SplitLayers::position_embedding(std::int64_t max_positions, std::int64_t dim,
                                                        ParameterInit init) {
  auto m = std::make_unique<PositionEmbedding>(max_positions, hidden_.part(dim, "model.n_embd"), init, hidden_samples_);
  hidden_.place_last(m->table());
  return m;
}

std::unique_ptr<Module> SplitLayers::layer_norm(std::int64_t features, float eps) {
  return std::make_unique<SplitLayerNorm>(hidden_, features, eps);
}

std::unique_ptr<Module> SplitLayers::rms_norm(std::int64_t features, float eps) {
  return std::make_unique<SplitRmsNorm>(hidden_, features, eps);
}

std::unique_ptr<Module> SplitLayers::dropout(float p) { return std::make_unique<Dropout>(p, stream_); }

Tensor SplitInput::forward(const Tensor& x, Context&) { return slice_for_rank(samples_.of(x), -1, index_, parts_); }

Tensor SplitInput::backward(const Tensor&, Context&) { return {}; }

SplitLayerNorm::SplitLayerNorm(const FeatureSplit& split, std::int64_t features, float eps)
    : split_(split), eps_(eps), full_(features) {
  const std::int64_t local = split.part(features, "model.n_embd");
  weight_ = &add_parameter("weight", {local}, ParameterInit::ones());
  bias_ = &add_parameter("bias", {local}, ParameterInit::zeros());
  split.place_last(*weight_);
  split.place_last(*bias_);
}

// The loops below are fp32, on the host (a GPU's tensors are copied there and back): bf16 / fp16
// activations and parameters are widened on the way in, and y, dx and the gradients rounded once
// on the way out.
Tensor SplitLayerNorm::forward(const Tensor& x_given, Context& ctx) {
  const Tensor x = on_host(ctx.as(x_given, DType::f32));
  const Tensor weight = on_host(ctx.as(weight_->data, DType::f32)), bias = on_host(ctx.as(bias_->data, DType::f32));
  const std::int64_t C = weight_->shape[0], rows = x.numel() / C;
  const std::int64_t computed = has_values(x) ? rows : 0;  // none on meta tensors (a planned step)
  const float* px = x.data<float>();
  // Per-row sum and sum of squares over this rank's features, then over the feature group.
  Tensor stats = Tensor::zeros({rows, 2}, DType::f32, host_side(x_given));
  float* ps = stats.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < computed; ++r) {
    double s = 0, s2 = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double v = px[r * C + c];
      s += v;
      s2 += v * v;
    }
    ps[2 * r] = float(s);
    ps[2 * r + 1] = float(s2);
  }
  split_.group->all_reduce(stats)->wait();
  Allocator& saved = host_side(x_given, *ctx.state().activations);
  Tensor y = ctx.empty(x.shape());
  Tensor y_here = on_host(y, false);
  Tensor xhat = Tensor::empty(x.shape(), DType::f32, saved), rstd = Tensor::empty({rows}, DType::f32, saved);
  float *py = y_here.data<float>(), *ph = xhat.data<float>(), *pr = rstd.data<float>();
  const float *w = weight.data<float>(), *b = bias.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < computed; ++r) {
    const double mean = ps[2 * r] / double(full_);
    const double var = std::max(0.0, ps[2 * r + 1] / double(full_) - mean * mean);
    const float inv = float(1.0 / std::sqrt(var + eps_));
    pr[r] = inv;
    for (std::int64_t c = 0; c < C; ++c) {
      const float h = (px[r * C + c] - float(mean)) * inv;
      ph[r * C + c] = h;
      py[r * C + c] = h * w[c] + b[c];
    }
  }
  from_host(y, y_here);
  ctx.saved = {xhat, rstd};
  return ctx.as(y, x_given.dtype());
}

Tensor SplitLayerNorm::backward(const Tensor& dy_given, Context& ctx) {
  const Tensor dy = on_host(ctx.as(dy_given, DType::f32));
  const Tensor weight = on_host(ctx.as(weight_->data, DType::f32));
  // The gradients accumulate in fp32 and are rounded into the parameters' once.
  Tensor grad_w = gradient_or_scratch(*weight_, ctx), grad_b = gradient_or_scratch(*bias_, ctx);
  Tensor dweight = ctx.as(grad_w, DType::f32), dbias = ctx.as(grad_b, DType::f32);
  Tensor dweight_here = on_host(dweight), dbias_here = on_host(dbias);
  const Tensor &xhat = ctx.saved.at(0), &rstd = ctx.saved.at(1);
  const std::int64_t C = weight_->shape[0], rows = xhat.numel() / C;
  const std::int64_t computed = has_values(xhat) ? rows : 0;  // none on meta tensors (a planned step)
  const float *pd = dy.data<float>(), *ph = xhat.data<float>(), *pr = rstd.data<float>();
  const float* w = weight.data<float>();
  float *dw = dweight_here.data<float>(), *db = dbias_here.data<float>();
  for (std::int64_t r = 0; r < computed; ++r)
    for (std::int64_t c = 0; c < C; ++c) {
      dw[c] += pd[r * C + c] * ph[r * C + c];
      db[c] += pd[r * C + c];
    }
  from_host(dweight, dweight_here);
  from_host(dbias, dbias_here);
  if (dweight.raw() != grad_w.raw()) ops::cast(grad_w, dweight);
  if (dbias.raw() != grad_b.raw()) ops::cast(grad_b, dbias);
  // dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, means over all C features.
  Tensor sums = Tensor::zeros({rows, 2}, DType::f32, host_side(dy_given));
  float* ps = sums.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < computed; ++r) {
    double s = 0, sh = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double gr = double(pd[r * C + c]) * w[c];
      s += gr;
      sh += gr * ph[r * C + c];
    }
    ps[2 * r] = float(s);
    ps[2 * r + 1] = float(sh);
  }
  split_.group->all_reduce(sums)->wait();
  Tensor dx = ctx.empty(dy.shape());
  Tensor dx_here = on_host(dx, false);
  float* px = dx_here.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < computed; ++r) {
    const float mg = ps[2 * r] / float(full_), mgh = ps[2 * r + 1] / float(full_);
    for (std::int64_t c = 0; c < C; ++c)
      px[r * C + c] = pr[r] * (pd[r * C + c] * w[c] - mg - ph[r * C + c] * mgh);
  }
  from_host(dx, dx_here);
  ctx.saved.clear();
  return ctx.as(dx, dy_given.dtype());
}

}  // namespace tidal::nn::tp
