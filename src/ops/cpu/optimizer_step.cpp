// AdamW and SGD updates, following torch.optim.AdamW / torch.optim.SGD (single-tensor path)
// operation for operation so that fp32 results agree to rounding.
#include "ops/optimizer_step.h"

#include "core/thread_share.h"
#include "ops/cpu/typed.h"

#include <algorithm>
#include <cmath>

namespace tidal::ops::cpu {

namespace {

// What every element's update reads besides its own values. Every constant in a local: the loop
// then vectorises (sqrt included: the build does not keep errno for math functions).
struct AdamWConstants {
  float beta1, beta2, eps, step_size, bc2_sqrt, decay, unscale;
};

AdamWConstants constants(const AdamWOptions& opt, std::int64_t step) {
  TIDAL_ASSERT(step >= 1, "adamw step {} (counts from 1)", step);
  const float bc1 = 1.0f - std::pow(opt.beta1, float(step));
  const float bc2 = 1.0f - std::pow(opt.beta2, float(step));
  return {.beta1 = opt.beta1, .beta2 = opt.beta2, .eps = opt.eps, .step_size = opt.lr / bc1,
          .bc2_sqrt = std::sqrt(bc2), .decay = 1.0f - opt.lr * opt.weight_decay, .unscale = 1.0f / opt.grad_scale};
}

bool is_float_type(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; }

void expect_adamw_tensors(const AdamWTensors& t) {
  expect_cpu_contiguous({&t.param, &t.grad, &t.m, &t.v}, "adamw operand");
  TIDAL_ASSERT(t.param.dtype() == DType::f32 && t.m.dtype() == DType::f32 && t.v.dtype() == DType::f32 &&
                   is_float_type(t.grad.dtype()) && t.grad.numel() == t.param.numel() &&
                   t.m.numel() == t.param.numel() && t.v.numel() == t.param.numel(),
               "adamw param {} grad {} m {} v {}", t.param.str(), t.grad.str(), t.m.str(), t.v.str());
  if (!t.low.defined()) return;
  expect_cpu_contiguous(t.low, "adamw low-precision copy");
  TIDAL_ASSERT(t.low.numel() == t.param.numel() && is_float_type(t.low.dtype()), "adamw param {} copy {}",
               t.param.str(), t.low.str());
}

// Elements [begin, end) of one parameter's update, on this thread.
void update(const AdamWTensors& t, const AdamWConstants& k, std::int64_t begin, std::int64_t end) {
  const float beta1 = k.beta1, beta2 = k.beta2, eps = k.eps, step_size = k.step_size, bc2_sqrt = k.bc2_sqrt,
              decay = k.decay, unscale = k.unscale;
  float* __restrict p = t.param.data<float>();
  float* __restrict pm = t.m.data<float>();
  float* __restrict pv = t.v.data<float>();
  const bool low = t.low.defined() && t.low.raw() != t.param.raw();  // else the parameter itself
  with_float_type(t.grad.dtype(), [&]<class G>() {
    // The gradient and the copy may share storage: no __restrict on them (omp simd vectorises
    // the loop all the same; an element is read before it is written).
    const auto run = [&](auto write_low) {
      const G* pg = t.grad.data<G>();
#pragma omp simd
      for (std::int64_t i = begin; i < end; ++i) {
        const float g = to_float(pg[i]) * unscale;
        const float mi = beta1 * pm[i] + (1.0f - beta1) * g;
        const float vi = beta2 * pv[i] + (1.0f - beta2) * g * g;
        pm[i] = mi;
        pv[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
        write_low(i, p[i]);
      }
    };
    if (!low) {
      run([](std::int64_t, float) {});
      return;
    }
    with_float_type(t.low.dtype(), [&]<class L>() {
      L* pl = t.low.data<L>();
      run([pl](std::int64_t i, float value) { pl[i] = from_float<L>(value); });
    });
  });
}

}  // namespace

void adamw_steps(std::vector<AdamWTensors>& tensors, const AdamWOptions& opt, std::int64_t step) {
  const AdamWConstants k = constants(opt, step);
  std::vector<std::int64_t> start{0};  // each tensor's first element among all of them
  for (const AdamWTensors& t : tensors) {
    expect_adamw_tensors(t);
    start.push_back(start.back() + t.param.numel());
  }
  // One parallel region for the run (a chunk's parameters): each thread updates an even share of
  // all their elements, tensor after tensor, its bounds on 16 elements (64 bytes of fp32).
  const std::int64_t total = start.back();
#pragma omp parallel
  {
    const auto [lo, hi] = thread_share(total, 16);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const std::int64_t b = std::max(lo, start[i]), e = std::min(hi, start[i + 1]);
      if (b < e) update(tensors[i], k, b - start[i], e - start[i]);
    }
  }
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWOptions& opt, std::int64_t step,
                Tensor* low) {
  std::vector<AdamWTensors> one{{.param = param, .grad = grad, .m = m, .v = v, .low = low ? *low : Tensor()}};
  cpu::adamw_steps(one, opt, step);
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

}  // namespace tidal::ops::cpu
