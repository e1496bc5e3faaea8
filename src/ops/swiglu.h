// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"; Llama's MLP): y = silu(gate) * up,
// silu(g) = g / (1 + exp(-g)), on a fused [gate | up] projection.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace tidal::ops {

namespace cpu {
void swiglu_forward(Tensor& y, const Tensor& gate_up);
void swiglu_backward(Tensor& dgate_up, const Tensor& dy, const Tensor& gate_up);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void swiglu_forward(Tensor& y, const Tensor& gate_up);
void swiglu_backward(Tensor& dgate_up, const Tensor& dy, const Tensor& gate_up);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void swiglu_forward(Tensor& y, const Tensor& gate_up);
void swiglu_backward(Tensor& dgate_up, const Tensor& dy, const Tensor& gate_up);
}  // namespace cuda
#endif

// gate_up: [N, 2I] (gate = columns [0, I), up = [I, 2I)); y: [N, I]; one dtype (fp32, bf16 or
// fp16), computed in fp32.
inline void swiglu_forward(Tensor& y, const Tensor& gate_up) { TIDAL_OPS_DISPATCH(gate_up, swiglu_forward, y, gate_up); }
// dgate_up [N, 2I] is written.
inline void swiglu_backward(Tensor& dgate_up, const Tensor& dy, const Tensor& gate_up) {
  TIDAL_OPS_DISPATCH(gate_up, swiglu_backward, dgate_up, dy, gate_up);
}

}  // namespace tidal::ops
