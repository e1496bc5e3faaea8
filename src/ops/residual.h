// Residual add and in-place accumulation / scaling of same-shape tensors.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void residual_add(Tensor& y, const Tensor& a, const Tensor& b);
void accumulate(Tensor& y, const Tensor& x);
void scale(Tensor& y, float s);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void residual_add(Tensor& y, const Tensor& a, const Tensor& b);
void accumulate(Tensor& y, const Tensor& x);
void scale(Tensor& y, float s);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void residual_add(Tensor& y, const Tensor& a, const Tensor& b);
void accumulate(Tensor& y, const Tensor& x);
void scale(Tensor& y, float s);
}  // namespace cuda
#endif

// y = a + b (y may alias a or b).
inline void residual_add(Tensor& y, const Tensor& a, const Tensor& b) { TIDAL_OPS_DISPATCH(y, residual_add, y, a, b); }
// y += x; on the host y may be fp32 beside a low-precision x (a gradient's fp32 sum).
inline void accumulate(Tensor& y, const Tensor& x) { TIDAL_OPS_DISPATCH(y, accumulate, y, x); }
// y *= s.
inline void scale(Tensor& y, float s) { TIDAL_OPS_DISPATCH(y, scale, y, s); }

}  // namespace tidal::ops
