// Dropout whose mask is regenerated from Philox keys in backward (nothing stored). Its key is
// (seed, hash of the module path) and the counter (element, step, micro-batch): recomputation
// under activation checkpointing reproduces the same mask for free.
#pragma once

#include "nn/module.h"

namespace tidal::nn {

class Dropout final : public Module {
 public:
  // `stream` > 0 draws masks independent of stream 0's for the same elements: a tensor-parallel
  // rank holding a block of the activations passes its tensor index.
  explicit Dropout(float p, std::uint64_t stream = 0) : p_(p), stream_(stream) {}

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  bool active(const Context& ctx) const { return ctx.state().training && p_ > 0.0f; }
  float p_;
  std::uint64_t stream_;
};

}  // namespace tidal::nn
