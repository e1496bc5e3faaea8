// AdamW and SGD updates on the GPU, one thread per element, with the CPU backend's constants
// (computed once on the host by the same expressions) and its order of operations, each
// operation correctly rounded and none fused (the _rn intrinsics: nvcc would otherwise contract
// a multiply and an add into an FMA, and ops/cpu/optimizer_step.cpp is built without
// contraction). The two backends then give the same bits, so a chunk's update does not depend on
// whether offload put its optimizer states on the host or the GPU.
#include "ops/optimizer_step.h"

#include "ops/cuda/common.cuh"

#include <cmath>

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// AdamW's per-step constants, as ops/cpu/optimizer_step.cpp computes them.
struct AdamWConstants {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float step_size;  // lr / (1 - beta1^step)
  float bc2_sqrt;   // sqrt(1 - beta2^step)
  float decay;      // 1 - lr * weight_decay
  float unscale;    // 1 / grad_scale
};

// ---- kernels ----

// `low` (may be null): the updated parameter in L too, over the gradient's storage or apart (no
// __restrict__ on them: a thread reads its element's gradient before it writes the copy).
template <class G, class L>
__global__ void adamw_kernel(float* __restrict__ p, const G* grad, float* __restrict__ m, float* __restrict__ v,
                             L* low, AdamWConstants k, std::int64_t n) {
  TIDAL_CUDA_FOR(i, n) {
    const float g = __fmul_rn(load(grad[i]), k.unscale);
    const float mi = __fadd_rn(__fmul_rn(k.beta1, m[i]), __fmul_rn(k.one_minus_beta1, g));
    const float vi = __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float denominator = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
    const float updated = __fsub_rn(__fmul_rn(p[i], k.decay), __fdiv_rn(__fmul_rn(k.step_size, mi), denominator));
    p[i] = updated;
    if (low != nullptr) low[i] = store<L>(updated);
  }
}

template <class G>
__global__ void sgd_kernel(float* __restrict__ p, const G* __restrict__ grad, float* __restrict__ buf, float lr,
                           float momentum, float weight_decay, bool first_step, std::int64_t n) {
  TIDAL_CUDA_FOR(i, n) {
    float g = __fadd_rn(load(grad[i]), __fmul_rn(weight_decay, p[i]));
    if (momentum != 0.0f) {
      buf[i] = first_step ? g : __fadd_rn(__fmul_rn(momentum, buf[i]), g);
      g = buf[i];
    }
    p[i] = __fsub_rn(p[i], __fmul_rn(lr, g));
  }
}

}  // namespace

// ---- launchers ----

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWOptions& opt, std::int64_t step,
                Tensor* low) {
  expect_cuda_contiguous({&param, &grad, &m, &v}, "adamw operand");
  TIDAL_ASSERT(param.dtype() == DType::f32 && m.dtype() == DType::f32 && v.dtype() == DType::f32 &&
                   grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
               "adamw param {} grad {} m {} v {}", param.str(), grad.str(), m.str(), v.str());
  TIDAL_ASSERT(step >= 1, "adamw step {} (counts from 1)", step);
  const std::int64_t n = param.numel();
  if (n == 0) return;
  const float bc1 = 1.0f - std::pow(opt.beta1, float(step));
  const float bc2 = 1.0f - std::pow(opt.beta2, float(step));
  const AdamWConstants k{.beta1 = opt.beta1,
                         .beta2 = opt.beta2,
                         .one_minus_beta1 = 1.0f - opt.beta1,
                         .one_minus_beta2 = 1.0f - opt.beta2,
                         .eps = opt.eps,
                         .step_size = opt.lr / bc1,
                         .bc2_sqrt = std::sqrt(bc2),
                         .decay = 1.0f - opt.lr * opt.weight_decay,
                         .unscale = 1.0f / opt.grad_scale};
  if (low != nullptr) {
    expect_cuda_contiguous({low}, "adamw low-precision copy");
    TIDAL_ASSERT(low->numel() == n, "adamw param {} copy {}", param.str(), low->str());
    if (low->raw() == param.raw()) low = nullptr;  // the parameter itself
  }
  with_float_type(grad.dtype(), [&]<class G>() {
    with_float_type(low != nullptr ? low->dtype() : DType::f32, [&]<class L>() {
      adamw_kernel<G, L><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(
          ptr<float>(param), ptr<G>(grad), ptr<float>(m), ptr<float>(v), low != nullptr ? ptr<L>(*low) : nullptr, k,
          n);
    });
  });
  TIDAL_CUDA_CHECK_LAUNCH("adamw_kernel");
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdOptions& opt, bool first_step) {
  expect_cuda_contiguous({&param, &grad, &momentum_buffer}, "sgd operand");
  TIDAL_ASSERT(param.dtype() == DType::f32 && momentum_buffer.dtype() == DType::f32 && grad.numel() == param.numel() &&
                   momentum_buffer.numel() == param.numel(),
               "sgd param {} grad {} buffer {}", param.str(), grad.str(), momentum_buffer.str());
  const std::int64_t n = param.numel();
  if (n == 0) return;
  with_float_type(grad.dtype(), [&]<class G>() {
    sgd_kernel<G><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<float>(param), ptr<G>(grad), ptr<float>(momentum_buffer), opt.lr, opt.momentum, opt.weight_decay,
        first_step, n);
  });
  TIDAL_CUDA_CHECK_LAUNCH("sgd_kernel");
}

}  // namespace tidal::ops::cuda
