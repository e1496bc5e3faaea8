// Bias add and bias gradient over the last dimension.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void bias_add(Tensor& y, const Tensor& b);
void bias_grad(Tensor& db, const Tensor& dy);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void bias_add(Tensor& y, const Tensor& b);
void bias_grad(Tensor& db, const Tensor& dy);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void bias_add(Tensor& y, const Tensor& b);
void bias_grad(Tensor& db, const Tensor& dy);
}  // namespace cuda
#endif

// y [N, C] += b [C], in place.
inline void bias_add(Tensor& y, const Tensor& b) { TIDAL_OPS_DISPATCH(y, bias_add, y, b); }
// db [C] += sum over rows of dy [N, C] (accumulates, like every parameter gradient).
inline void bias_grad(Tensor& db, const Tensor& dy) { TIDAL_OPS_DISPATCH(dy, bias_grad, db, dy); }

}  // namespace tidal::ops
