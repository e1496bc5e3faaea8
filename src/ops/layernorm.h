// LayerNorm over the last dimension, with the per-row mean and reciprocal std saved for backward.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                       const Tensor& b, float eps);
void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                        const Tensor& w, const Tensor& mean, const Tensor& rstd);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                       const Tensor& b, float eps);
void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                        const Tensor& w, const Tensor& mean, const Tensor& rstd);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                       const Tensor& b, float eps);
void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                        const Tensor& w, const Tensor& mean, const Tensor& rstd);
}  // namespace cuda
#endif

// x, y: [N, C]; w, b: [C]; mean, rstd: [N] fp32.
inline void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                              const Tensor& b, float eps) {
  TIDAL_OPS_DISPATCH(x, layernorm_forward, y, mean, rstd, x, w, b, eps);
}
// dx is written; dw and db accumulate.
inline void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                               const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  TIDAL_OPS_DISPATCH(x, layernorm_backward, dx, dw, db, dy, x, w, mean, rstd);
}

}  // namespace tidal::ops
