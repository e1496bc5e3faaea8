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

AdamWConstants adamw_constants(const AdamWOptions& opt, std::int64_t step) {
  const float bc1 = 1.0f - std::pow(opt.beta1, float(step));
  const float bc2 = 1.0f - std::pow(opt.beta2, float(step));
  return {.beta1 = opt.beta1,
          .beta2 = opt.beta2,
          .one_minus_beta1 = 1.0f - opt.beta1,
          .one_minus_beta2 = 1.0f - opt.beta2,
          .eps = opt.eps,
          .step_size = opt.lr / bc1,
          .bc2_sqrt = std::sqrt(bc2),
          .decay = 1.0f - opt.lr * opt.weight_decay,
          .unscale = 1.0f / opt.grad_scale};
}

// A multi-tensor step's list (adamw_steps): up to kListMax tensors, passed by value as the
// kernel's argument (about 1.3 KB, within the 4 KB every CUDA version takes), each split into
// blocks of kListBlockElements; block b works on tensor t where first_block[t] <= b <
// first_block[t + 1].
constexpr int kListMax = 24;
constexpr std::int64_t kListBlockElements = 8 * kThreads;

template <class G, class L>
struct AdamWList {
  float* p[kListMax];
  const G* grad[kListMax];
  float* m[kListMax];
  float* v[kListMax];
  L* low[kListMax];
  std::int64_t n[kListMax];
  int first_block[kListMax + 1];
  int count;
};

// ---- kernels ----

// Element i of one tensor. `low` (may be null): the updated parameter in L too, over the
// gradient's storage or apart (no __restrict__ on them: a thread reads its element's gradient
// before it writes the copy).
template <class G, class L>
__device__ __forceinline__ void adamw_element(float* __restrict__ p, const G* grad, float* __restrict__ m,
                                              float* __restrict__ v, L* low, const AdamWConstants& k, std::int64_t i) {
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

template <class G, class L>
__global__ void adamw_kernel(float* __restrict__ p, const G* grad, float* __restrict__ m, float* __restrict__ v,
                             L* low, AdamWConstants k, std::int64_t n) {
  TIDAL_CUDA_FOR(i, n) adamw_element(p, grad, m, v, low, k, i);
}

template <class G, class L>
__global__ void adamw_list_kernel(AdamWList<G, L> list, AdamWConstants k) {
  int t = 0;
  while (t + 1 < list.count && int(blockIdx.x) >= list.first_block[t + 1]) ++t;
  const std::int64_t begin = std::int64_t(int(blockIdx.x) - list.first_block[t]) * kListBlockElements;
  const std::int64_t end = min(list.n[t], begin + kListBlockElements);
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    adamw_element(list.p[t], list.grad[t], list.m[t], list.v[t], list.low[t], k, i);
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
  const AdamWConstants k = adamw_constants(opt, step);
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

void adamw_steps(std::vector<AdamWTensors>& tensors, const AdamWOptions& opt, std::int64_t step) {
  TIDAL_ASSERT(step >= 1, "adamw step {} (counts from 1)", step);
  const AdamWConstants k = adamw_constants(opt, step);
  // The tensors in lists of one gradient type and one copy type (a chunk's share both), in order.
  const auto copy_of = [](AdamWTensors& t) {
    return t.low.defined() && t.low.raw() != t.param.raw() ? &t.low : nullptr;  // the parameter itself: none
  };
  std::size_t first = 0;
  while (first < tensors.size()) {
    AdamWTensors& head = tensors[first];
    const DType grad_type = head.grad.dtype();
    const DType low_type = copy_of(head) ? head.low.dtype() : DType::f32;
    const bool has_low = copy_of(head) != nullptr;
    std::size_t last = first;
    while (last < tensors.size() && last - first < std::size_t(kListMax) && tensors[last].grad.dtype() == grad_type &&
           (copy_of(tensors[last]) != nullptr) == has_low && (!has_low || tensors[last].low.dtype() == low_type))
      ++last;
    with_float_type(grad_type, [&]<class G>() {
      with_float_type(low_type, [&]<class L>() {
        AdamWList<G, L> list{};
        int blocks = 0;
        for (std::size_t j = first; j < last; ++j) {
          AdamWTensors& t = tensors[j];
          expect_cuda_contiguous({&t.param, &t.grad, &t.m, &t.v}, "adamw operand");
          const std::int64_t n = t.param.numel();
          TIDAL_ASSERT(t.param.dtype() == DType::f32 && t.m.dtype() == DType::f32 && t.v.dtype() == DType::f32 &&
                           t.grad.numel() == n && t.m.numel() == n && t.v.numel() == n,
                       "adamw param {} grad {} m {} v {}", t.param.str(), t.grad.str(), t.m.str(), t.v.str());
          Tensor* low = copy_of(t);
          if (low != nullptr) {
            expect_cuda_contiguous(*low, "adamw low-precision copy");
            TIDAL_ASSERT(low->numel() == n, "adamw param {} copy {}", t.param.str(), low->str());
          }
          const int i = list.count++;
          list.p[i] = ptr<float>(t.param);
          list.grad[i] = ptr<G>(t.grad);
          list.m[i] = ptr<float>(t.m);
          list.v[i] = ptr<float>(t.v);
          list.low[i] = low != nullptr ? ptr<L>(*low) : nullptr;
          list.n[i] = n;
          list.first_block[i] = blocks;
          blocks += int((n + kListBlockElements - 1) / kListBlockElements);
        }
        list.first_block[list.count] = blocks;
        if (blocks > 0) adamw_list_kernel<G, L><<<blocks, kThreads, 0, compute_stream()>>>(list, k);
      });
    });
    TIDAL_CUDA_CHECK_LAUNCH("adamw_list_kernel");
    first = last;
  }
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
