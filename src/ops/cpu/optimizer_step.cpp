// AdamW and SGD updates, following torch.optim.AdamW / torch.optim.SGD (single-tensor path)
// operation for operation so that fp32 results agree to rounding.
#include "ops/optimizer_step.h"

#include "ops/cpu/typed.h"

#include <cmath>

namespace tidal::ops::cpu {

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWOptions& opt, std::int64_t step,
                Tensor* low) {
  expect_cpu_contiguous({&param, &grad, &m, &v}, "adamw operand");
  TIDAL_ASSERT(param.dtype() == DType::f32 && m.dtype() == DType::f32 && v.dtype() == DType::f32 &&
                   grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
               "adamw param {} grad {} m {} v {}", param.str(), grad.str(), m.str(), v.str());
  TIDAL_ASSERT(step >= 1, "adamw step {} (counts from 1)", step);
  if (low != nullptr) {
    expect_cpu_contiguous(*low, "adamw low-precision copy");
    TIDAL_ASSERT(low->numel() == param.numel(), "adamw param {} copy {}", param.str(), low->str());
    if (low->raw() == param.raw()) low = nullptr;  // the parameter itself
  }
  // Every constant in a local: the loop then vectorises (sqrt included: the build does not keep
  // errno for math functions), and the threads split it evenly.
  const float beta1 = opt.beta1, beta2 = opt.beta2, eps = opt.eps;
  const float bc1 = 1.0f - std::pow(beta1, float(step));
  const float bc2 = 1.0f - std::pow(beta2, float(step));
  const float step_size = opt.lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  const float decay = 1.0f - opt.lr * opt.weight_decay;
  const float unscale = 1.0f / opt.grad_scale;
  const std::int64_t n = param.numel();
  float* __restrict p = param.data<float>();
  float* __restrict pm = m.data<float>();
  float* __restrict pv = v.data<float>();
  with_float_type(grad.dtype(), [&]<class G>() {
    // The gradient and the copy may share storage: no __restrict on them (omp simd vectorises
    // the loop all the same; an element is read before it is written).
    const auto update = [&](auto write_low) {
      const G* pg = grad.data<G>();
#pragma omp parallel for simd schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        const float g = to_float(pg[i]) * unscale;
        const float mi = beta1 * pm[i] + (1.0f - beta1) * g;
        const float vi = beta2 * pv[i] + (1.0f - beta2) * g * g;
        pm[i] = mi;
        pv[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
        write_low(i, p[i]);
      }
    };
    if (low == nullptr) {
      update([](std::int64_t, float) {});
      return;
    }
    with_float_type(low->dtype(), [&]<class L>() {
      L* pl = low->data<L>();
      update([pl](std::int64_t i, float value) { pl[i] = from_float<L>(value); });
    });
  });
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdOptions& opt, bool first_step) {
  expect_cpu_contiguous({&param, &grad, &momentum_buffer}, "sgd operand");
  TIDAL_ASSERT(param.dtype() == DType::f32 && momentum_buffer.dtype() == DType::f32 && grad.numel() == param.numel() &&
                   momentum_buffer.numel() == param.numel(),
               "sgd param {} grad {} buffer {}", param.str(), grad.str(), momentum_buffer.str());
  const float lr = opt.lr, momentum = opt.momentum, weight_decay = opt.weight_decay;
  const std::int64_t n = param.numel();
  float* __restrict p = param.data<float>();
  float* __restrict buf = momentum_buffer.data<float>();
  with_float_type(grad.dtype(), [&]<class G>() {
    const G* __restrict pg = grad.data<G>();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      float g = to_float(pg[i]) + weight_decay * p[i];
      if (momentum != 0.0f) {
        buf[i] = first_step ? g : momentum * buf[i] + g;
        g = buf[i];
      }
      p[i] -= lr * g;
    }
  });
}

void adamw_steps(std::vector<AdamWTensors>& tensors, const AdamWOptions& opt, std::int64_t step) {
  for (AdamWTensors& t : tensors)
    cpu::adamw_step(t.param, t.grad, t.m, t.v, opt, step, t.low.defined() ? &t.low : nullptr);
}

}  // namespace tidal::ops::cpu
