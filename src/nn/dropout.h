// Dropout whose mask is regenerated from Philox keys in backward (nothing stored). Its key is
// (seed, hash of the module path) and the counter (element, step, micro-batch): recomputation
// under activation checkpointing reproduces the same mask for free.
#pragma once

#include "nn/batch_slice.h"
#include "nn/module.h"

namespace tidal::nn {

class Dropout final : public Module {
 public:
  // `stream` > 0 draws masks independent of stream 0's for the same elements: a tensor-parallel
  // rank holding a block of the activations passes its tensor index. `positions` (its position
  // fields) says which run of every sample's positions x [B, T', ...] holds: a sequence-parallel
  // rank then draws exactly the single process's mask for its positions.
  explicit Dropout(float p, std::uint64_t stream = 0, BatchSlice positions = {})
      : p_(p), stream_(stream), positions_(positions) {}

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  bool active(const Context& ctx) const { return ctx.state().training && p_ > 0.0f; }
  // Samples [b0, b1) of x and, unless p1 < 0 (positions not split), their positions [p0, p1).
  struct Run {
    std::int64_t b0, b1, p0, p1;
    Tensor of(const Tensor& t) const;
  };
  // Calls fn(key, run) for each run of x whose elements are one contiguous run of the single
  // process's: all of x, or one sample's run of positions when positions are split.
  template <class Fn>
  void for_each_run(const Context& ctx, const Tensor& x, Fn fn) const;

  float p_;
  std::uint64_t stream_;
  BatchSlice positions_;
};

}  // namespace tidal::nn
