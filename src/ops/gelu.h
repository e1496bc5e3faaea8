// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void gelu_forward(Tensor& y, const Tensor& x);
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x);
}  // namespace cpu
#if TIDAL_CUDA
namespace cuda {
void gelu_forward(Tensor& y, const Tensor& x);
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x);
}  // namespace cuda
#endif

inline void gelu_forward(Tensor& y, const Tensor& x) { TIDAL_OPS_DISPATCH(x, gelu_forward, y, x); }
inline void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  TIDAL_OPS_DISPATCH(x, gelu_backward, dx, dy, x);
}

}  // namespace tidal::ops
