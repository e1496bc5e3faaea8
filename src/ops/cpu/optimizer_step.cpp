// AdamW and SGD updates, following torch.optim.AdamW / torch.optim.SGD (single-tensor path)
// operation for operation so that fp32 results agree to rounding.
#include "ops/optimizer_step.h"

#include "ops/cpu/typed.h"

#include <cmath>

namespace tidal::ops::cpu {

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWOptions& opt, std::int64_t step) {
  expect_cpu_contiguous({&param, &grad, &m, &v}, "adamw operand");
  TIDAL_ASSERT(param.dtype() == DType::f32 && m.dtype() == DType::f32 && v.dtype() == DType::f32 &&
                   grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
               "adamw param {} grad {} m {} v {}", param.str(), grad.str(), m.str(), v.str());
  TIDAL_ASSERT(step >= 1, "adamw step {} (counts from 1)", step);
  const float bc1 = 1.0f - std::pow(opt.beta1, float(step));
  const float bc2 = 1.0f - std::pow(opt.beta2, float(step));
  const float step_size = opt.lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  const float decay = 1.0f - opt.lr * opt.weight_decay;
  const float unscale = 1.0f / opt.grad_scale;
  const std::int64_t n = param.numel();
  float* p = param.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  with_float_type(grad.dtype(), [&]<class G>() {
    const G* pg = grad.data<G>();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const float g = to_float(pg[i]) * unscale;
      const float mi = opt.beta1 * pm[i] + (1.0f - opt.beta1) * g;
      const float vi = opt.beta2 * pv[i] + (1.0f - opt.beta2) * g * g;
      pm[i] = mi;
      pv[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + opt.eps);
    }
  });
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdOptions& opt, bool first_step) {
  expect_cpu_contiguous({&param, &grad, &momentum_buffer}, "sgd operand");
  TIDAL_ASSERT(param.dtype() == DType::f32 && momentum_buffer.dtype() == DType::f32 && grad.numel() == param.numel() &&
                   momentum_buffer.numel() == param.numel(),
               "sgd param {} grad {} buffer {}", param.str(), grad.str(), momentum_buffer.str());
  const std::int64_t n = param.numel();
  float* p = param.data<float>();
  float* buf = momentum_buffer.data<float>();
  with_float_type(grad.dtype(), [&]<class G>() {
    const G* pg = grad.data<G>();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      float g = to_float(pg[i]) + opt.weight_decay * p[i];
      if (opt.momentum != 0.0f) {
        buf[i] = first_step ? g : opt.momentum * buf[i] + g;
        g = buf[i];
      }
      p[i] -= opt.lr * g;
    }
  });
}

}  // namespace tidal::ops::cpu
