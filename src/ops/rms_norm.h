// RMSNorm over the last dimension (Llama's LlamaRMSNorm; Zhang & Sennrich 2019): y = x w / rms(x),
// rms(x) = sqrt(mean(x^2) + eps), with the per-row reciprocal rms saved for backward.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void rms_norm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps);
void rms_norm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void rms_norm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps);
void rms_norm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void rms_norm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps);
void rms_norm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd);
}  // namespace cuda
#endif

// x, y: [N, C] (fp32, bf16 or fp16, the same dtype); w: [C] fp32; rstd: [N] fp32. The row's
// statistics and the product are computed in fp32 and y rounded once.
inline void rms_norm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  TIDAL_OPS_DISPATCH(x, rms_norm_forward, y, rstd, x, w, eps);
}
// dx is written (x's dtype); dw [C] fp32 accumulates.
inline void rms_norm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                              const Tensor& rstd) {
  TIDAL_OPS_DISPATCH(x, rms_norm_backward, dx, dw, dy, x, w, rstd);
}

}  // namespace tidal::ops
