// LayerNorm or RMSNorm over features split as a FeatureSplit says (2D, 2.5D and 3D tensor
// parallelism): each rank's sums over its features are summed over the feature group, so every
// rank normalizes by the statistics of the whole row (ops/split_norm.h, on the device the
// activations live on).
#pragma once

#include "nn/tp/feature_split.h"
#include "ops/split_norm.h"

namespace tidal::nn::tp {

class SplitNorm final : public Module {
 public:
  // centered: LayerNorm (weight and bias); false: RMSNorm (weight only).
  SplitNorm(const FeatureSplit& split, std::int64_t features, float eps, bool centered);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [..., C'] -> [..., C']
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  FeatureSplit split_;
  ops::SplitNormOptions options_;
  Parameter* weight_;           // [C'], this rank's features
  Parameter* bias_ = nullptr;   // [C'] (LayerNorm)
};

}  // namespace tidal::nn::tp
