// How a tensor-parallel mode splits the features of hidden states, and the layers that only need
// that: norms whose statistics are summed over the ranks holding the other features
// (nn/tp/split_norm.h), and the placement of parameters shaped like the features (norms,
// biases, positions).
#pragma once

#include "comm/communicator.h"
#include "nn/layer_factory.h"

#include <vector>

namespace tidal::nn::tp {

struct FeatureSplit {
  comm::Communicator* group;  // the ranks holding the other feature blocks, ordered by block
  // Ranks holding this same feature block but other samples: gradients are summed over them.
  std::vector<comm::Communicator*> replicas;
  int copies = 1;  // how many ranks of the tensor group hold each block

  int parts() const { return group->size(); }
  int index() const { return group->rank(); }
  // n / parts(), or an error naming `key` when it does not divide.
  std::int64_t part(std::int64_t n, const char* key) const;
  // p (already of the local shape) becomes this rank's block of its last dimension.
  void place_last(Parameter& p) const;
  // p, made with the whole shape, becomes this rank's block of its last dimension.
  void split_last(Parameter& p) const;
};

// A small table [V, C] with whole rows and features split: looks up the ids of `samples`.
class SplitEmbedding final : public TableLookup {
 public:
  SplitEmbedding(const FeatureSplit& split, BatchSlice samples, std::int64_t num, std::int64_t dim, ParameterInit init);
  Parameter& table() override;
  Tensor forward(const Tensor& ids, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  BatchSlice samples_;
  TableLookup* inner_;
};

// The replica's whole [B, ..., F] -> the rows of `samples` and the `index`-th of `parts`
// feature blocks (data entering a model: no gradient is returned).
class SplitInput final : public Module {
 public:
  SplitInput(BatchSlice samples, int index, int parts) : samples_(samples), index_(index), parts_(parts) {}
  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  BatchSlice samples_;
  int index_, parts_;
};

// The layers that every mode splitting hidden states (2D, 2.5D, 3D) makes the same way, from how
// it splits them: small embeddings, positions, LayerNorm, dropout and feature-shaped parameters.
class SplitLayers : public LayerFactory {
 public:
  // `stream` tells dropout masks of different ranks apart (the rank's tensor index).
  SplitLayers(FeatureSplit hidden, BatchSlice hidden_samples, std::uint64_t stream)
      : hidden_(std::move(hidden)), hidden_samples_(hidden_samples), stream_(stream) {}

  std::unique_ptr<TableLookup> embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override;
  std::unique_ptr<Module> position_embedding(std::int64_t max_positions, std::int64_t dim, ParameterInit init) override;
  std::unique_ptr<Module> layer_norm(std::int64_t features, float eps) override;
  std::unique_ptr<Module> rms_norm(std::int64_t features, float eps) override;
  std::unique_ptr<Module> dropout(float p) override;
  void split_hidden(Parameter& p) override { hidden_.split_last(p); }

 private:
  FeatureSplit hidden_;
  BatchSlice hidden_samples_;
  std::uint64_t stream_;
};

}  // namespace tidal::nn::tp
