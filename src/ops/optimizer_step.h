// Optimizer update kernels: AdamW (PyTorch semantics: bias correction, decoupled weight decay)
// and SGD with momentum. Parameters and states are fp32; gradients may be fp32, bf16 or fp16
// and are widened on the fly.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

#include <cstdint>
#include <vector>

namespace tidal::ops {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  // The gradient handed in is grad_scale times the one to apply: a loss scale, with a clipping
  // factor folded in, is divided out inside the update.
  float grad_scale = 1.0f;
};

// One parameter's tensors in a multi-tensor AdamW step (adamw_steps): its fp32 master values,
// gradient, moments and, when defined, its compute-precision copy (`low` of adamw_step).
struct AdamWTensors {
  Tensor param, grad, m, v, low;
};

struct SgdOptions {
  float lr = 1e-2f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
};

namespace cpu {
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWOptions& opt,
                std::int64_t step, Tensor* low);
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdOptions& opt, bool first_step);
void adamw_steps(std::vector<AdamWTensors>& tensors, const AdamWOptions& opt, std::int64_t step);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWOptions& opt,
                std::int64_t step, Tensor* low);
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdOptions& opt, bool first_step);
void adamw_steps(std::vector<AdamWTensors>& tensors, const AdamWOptions& opt, std::int64_t step);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWOptions& opt,
                std::int64_t step, Tensor* low);
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdOptions& opt, bool first_step);
void adamw_steps(std::vector<AdamWTensors>& tensors, const AdamWOptions& opt, std::int64_t step);
}  // namespace cuda
#endif

// step counts from 1 (the bias corrections use it). `low`, when given: the updated parameter in
// low's dtype too (a chunk's compute-precision copy, ops::cast's rounding), written in the same
// pass over the memory; it may be the gradient's own storage (the param chunk holds the
// gradient until the step), each element read before it is written.
inline void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWOptions& opt,
                       std::int64_t step, Tensor* low = nullptr) {
  TIDAL_OPS_DISPATCH(param, adamw_step, param, grad, m, v, opt, step, low);
}
// adamw_step on each of `tensors` (every one on the first one's device), as one pass: on a GPU one
// launch for up to a few dozen tensors (a chunk's parameters, or a model's), on the CPU one
// parallel region for them all (each thread an even share of their elements), the same bits as a
// step each.
inline void adamw_steps(std::vector<AdamWTensors>& tensors, const AdamWOptions& opt, std::int64_t step) {
  if (tensors.empty()) return;
  TIDAL_OPS_DISPATCH(tensors.front().param, adamw_steps, tensors, opt, step);
}
// On the first step the buffer is set to the gradient (PyTorch's SGD, dampening 0).
inline void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdOptions& opt,
                     bool first_step) {
  TIDAL_OPS_DISPATCH(param, sgd_step, param, grad, momentum_buffer, opt, first_step);
}

}  // namespace tidal::ops
