// GELU in its two forms: the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// (GPT-2's "gelu_new") and the exact 0.5 x (1 + erf(x / sqrt(2))) (BERT's and ViT's "gelu").
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"
#include "ops/gelu_form.h"

namespace tidal::ops {

namespace cpu {
void gelu_forward(Tensor& y, const Tensor& x, GeluForm form);
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, GeluForm form);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void gelu_forward(Tensor& y, const Tensor& x, GeluForm form);
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, GeluForm form);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void gelu_forward(Tensor& y, const Tensor& x, GeluForm form);
void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, GeluForm form);
}  // namespace cuda
#endif

inline void gelu_forward(Tensor& y, const Tensor& x, GeluForm form = GeluForm::tanh) {
  TIDAL_OPS_DISPATCH(x, gelu_forward, y, x, form);
}
inline void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, GeluForm form = GeluForm::tanh) {
  TIDAL_OPS_DISPATCH(x, gelu_backward, dx, dy, x, form);
}

}  // namespace tidal::ops
