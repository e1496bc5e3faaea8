// How a tensor-parallel mode splits the features of hidden states, and the layers that only need
// that: a LayerNorm whose statistics are summed over the ranks holding the other features, and
// the placement of parameters shaped like the features (LayerNorm, biases, positions).
#pragma once

#include "comm/communicator.h"
#include "nn/module.h"

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
};

// LayerNorm over features split as `split` says.
class SplitLayerNorm final : public Module {
 public:
  SplitLayerNorm(const FeatureSplit& split, std::int64_t features, float eps);

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  FeatureSplit split_;
  float eps_;
  std::int64_t full_;
  Parameter* weight_;
  Parameter* bias_;
};

}  // namespace tidal::nn::tp
