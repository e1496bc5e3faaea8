#include "nn/tp/feature_split.h"

#include "core/error.h"
#include "nn/context.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/tp/mappings.h"
#include "nn/tp/split_norm.h"


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
  return std::make_unique<SplitNorm>(hidden_, features, eps, true);
}

std::unique_ptr<Module> SplitLayers::rms_norm(std::int64_t features, float eps) {
  return std::make_unique<SplitNorm>(hidden_, features, eps, false);
}

std::unique_ptr<Module> SplitLayers::dropout(float p) { return std::make_unique<Dropout>(p, stream_); }

Tensor SplitInput::forward(const Tensor& x, Context&) { return slice_for_rank(samples_.of(x), -1, index_, parts_); }

Tensor SplitInput::backward(const Tensor&, Context&) { return {}; }

}  // namespace tidal::nn::tp
