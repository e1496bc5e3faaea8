// Dropout whose mask is regenerated from Philox keys in backward (nothing stored). Its key is
// (seed, hash of the module path) and the counter (element, step, micro-batch): recomputation
// under activation checkpointing reproduces the same mask for free.
#pragma once

#include "nn/module.h"

namespace tidal::nn {

class Dropout final : public Module {
 public:
  explicit Dropout(float p) : p_(p) {}

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  bool active(const Context& ctx) const { return ctx.state().training && p_ > 0.0f; }
  float p_;
};

}  // namespace tidal::nn
