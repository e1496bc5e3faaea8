#include "nn/tp/layers_1d.h"

#include "nn/dropout.h"
#include "nn/layernorm.h"
#include "nn/rms_norm.h"
#include "nn/tp/cross_entropy.h"
#include "nn/tp/embedding.h"
#include "nn/tp/linear_1d.h"
#include "nn/tp/lm_head.h"
#include "nn/tp/mappings.h"

namespace tidal::nn::tp {
namespace {

// The replica's whole input -> this rank's slice of the features. The input is data: no
// gradient is returned.
class ScatterFeatures final : public Module {
 public:
  explicit ScatterFeatures(comm::Communicator& group) : group_(group) {}
  Tensor forward(const Tensor& x, Context&) override { return ScatterToGroup::forward(x, group_, -1); }
  Tensor backward(const Tensor&, Context&) override { return {}; }

 private:
  comm::Communicator& group_;
};

class Layers1d final : public LayerFactory {
 public:
  explicit Layers1d(comm::Communicator& group) : group_(group) {}

  std::unique_ptr<TableLookup> vocab_embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override {
    return std::make_unique<VocabParallelEmbedding>(num, dim, init, group_);
  }
  std::unique_ptr<TableLookup> embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override {
    return replicated(std::make_unique<Embedding>(num, dim, init));
  }
  std::unique_ptr<Module> position_embedding(std::int64_t max_positions, std::int64_t dim, ParameterInit init) override {
    return replicated(std::make_unique<PositionEmbedding>(max_positions, dim, init));
  }
  std::unique_ptr<Module> layer_norm(std::int64_t features, float eps) override {
    return replicated(std::make_unique<LayerNorm>(features, eps));
  }
  std::unique_ptr<Module> rms_norm(std::int64_t features, float eps) override {
    return replicated(std::make_unique<RmsNorm>(features, eps));
  }
  std::unique_ptr<Module> dropout(float p) override { return std::make_unique<Dropout>(p); }
  std::unique_ptr<Module> input_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init,
                                       int segments) override {
    return std::make_unique<ColumnParallelLinear>(in, out, bias, init, group_, false, segments);
  }
  std::unique_ptr<Module> output_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init) override {
    return std::make_unique<RowParallelLinear>(in, out, bias, init, group_);
  }
  std::unique_ptr<Module> hidden_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init) override {
    return std::make_unique<ColumnParallelLinear>(in, out, bias, init, group_, /*gather_output=*/true);
  }
  std::unique_ptr<Module> split_features() override { return std::make_unique<ScatterFeatures>(group_); }
  std::unique_ptr<Module> tied_head(TableLookup& embedding, bool bias) override {
    return std::make_unique<VocabParallelLmHead>(embedding.table(), bias, group_);
  }
  std::unique_ptr<Loss> cross_entropy(std::int64_t classes) override {
    return std::make_unique<VocabParallelCrossEntropy>(classes, padded_vocab(classes, group_.size()), group_);
  }
  void split_hidden(Parameter& p) override { p.copies = group_.size(); }
  int feature_parts() const override { return group_.size(); }
  BatchSlice batch_slice() const override { return {}; }
  Tensor gather_features(const Tensor& part) override { return all_gather_along(part, group_, -1); }

 private:
  // A whole module held by every rank of the group: each of its parameters is one block in p copies.
  template <class M>
  std::unique_ptr<M> replicated(std::unique_ptr<M> m) {
    for (Parameter* p : m->parameters()) p->copies = group_.size();
    return m;
  }

  comm::Communicator& group_;
};

}  // namespace

std::unique_ptr<LayerFactory> layers_1d(comm::Communicator& tensor_group) {
  return std::make_unique<Layers1d>(tensor_group);
}

}  // namespace tidal::nn::tp
