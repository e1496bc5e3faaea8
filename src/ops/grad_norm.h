// Global gradient norm and clipping.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

#include <span>

namespace tidal::ops {

namespace cpu {
double sum_of_squares(const Tensor& x);
}

// Sum of squares of one tensor, accumulated in double.
inline double sum_of_squares(const Tensor& x) {
  TIDAL_CHECK(!x.device().is_cuda(), "op sum_of_squares has no CUDA implementation in this build");
  return cpu::sum_of_squares(x);
}
// The L2 norm over all tensors, as one vector.
double global_norm(std::span<const Tensor> tensors);
// Scales all tensors by max_norm / (norm + 1e-6) when the norm exceeds max_norm (PyTorch's
// clip_grad_norm_); returns the norm before clipping.
double clip_grad_norm(std::span<Tensor> grads, double max_norm);
// The scaling step of clipping, for a norm computed elsewhere (over shards on many ranks).
void clip_to_norm(std::span<Tensor> grads, double norm, double max_norm);

}  // namespace tidal::ops
