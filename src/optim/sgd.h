// SGD with momentum (PyTorch semantics, dampening 0) over a list of parameters.
#pragma once

#include "nn/parameter.h"
#include "ops/optimizer_step.h"

#include <vector>

namespace tidal::optim {

class Sgd {
 public:
  Sgd(std::vector<nn::Parameter*> params, const ops::SgdOptions& options);

  void step();
  void set_lr(float lr) { options_.lr = lr; }

 private:
  std::vector<nn::Parameter*> params_;
  std::vector<Tensor> buffers_;
  ops::SgdOptions options_;
  bool first_ = true;
};

}  // namespace tidal::optim
