// Softmax over the last dimension.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void softmax_forward(Tensor& y, const Tensor& x);
void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void softmax_forward(Tensor& y, const Tensor& x);
void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void softmax_forward(Tensor& y, const Tensor& x);
void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y);
}  // namespace cuda
#endif

// x, y: [N, C].
inline void softmax_forward(Tensor& y, const Tensor& x) { TIDAL_OPS_DISPATCH(x, softmax_forward, y, x); }
inline void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  TIDAL_OPS_DISPATCH(y, softmax_backward, dx, dy, y);
}

}  // namespace tidal::ops
