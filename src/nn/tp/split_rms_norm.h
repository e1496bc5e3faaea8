// RMSNorm over features split as a FeatureSplit says (2D, 2.5D and 3D tensor parallelism): each
// rank's sum of squares over its features is summed over the feature group, so every rank
// divides by the root mean square of the whole row.
#pragma once

#include "nn/tp/feature_split.h"

namespace tidal::nn::tp {

class SplitRmsNorm final : public Module {
 public:
  SplitRmsNorm(const FeatureSplit& split, std::int64_t features, float eps);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [..., C'] -> [..., C']
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  FeatureSplit split_;
  float eps_;
  std::int64_t full_;  // C, the whole row's features
  Parameter* weight_;  // [C'], this rank's features
};

}  // namespace tidal::nn::tp
