// AdamW over a list of parameters: one momentum and one variance tensor per parameter (fp32),
// updated with ops::adamw_steps. The learning rate can change between steps (schedules).
#pragma once

#include "nn/parameter.h"
#include "ops/optimizer_step.h"

#include <vector>

namespace tidal::optim {

class AdamW {
 public:
  AdamW(std::vector<nn::Parameter*> params, const ops::AdamWOptions& options);

  void step();  // one update from each parameter's grad
  void set_lr(float lr) { options_.lr = lr; }
  // The next steps' gradients are `scale` times the ones to apply (ops::AdamWOptions::grad_scale).
  void set_grad_scale(float scale) { options_.grad_scale = scale; }
  const ops::AdamWOptions& options() const { return options_; }
  std::int64_t steps_taken() const { return step_; }
  void set_steps_taken(std::int64_t steps) { step_ = steps; }  // when resuming from a checkpoint

  const std::vector<nn::Parameter*>& parameters() const { return params_; }
  Tensor& momentum(std::size_t i) { return m_.at(i); }
  Tensor& variance(std::size_t i) { return v_.at(i); }
  const Tensor& momentum(std::size_t i) const { return m_.at(i); }
  const Tensor& variance(std::size_t i) const { return v_.at(i); }

 private:
  std::vector<nn::Parameter*> params_;
  std::vector<Tensor> m_, v_;
  ops::AdamWOptions options_;
  std::int64_t step_ = 0;
};

}  // namespace tidal::optim
