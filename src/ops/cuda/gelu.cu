#include "ops/gelu.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
constexpr int kThreads = 256;

// ---- kernels ----

template <class T>
__global__ void gelu_forward_kernel(T* __restrict__ y, const T* __restrict__ x, std::int64_t n, GeluForm form) {
  TIDAL_CUDA_FOR(i, n) {
    const float v = load(x[i]);
    const float s = form == GeluForm::tanh ? tanhf(kSqrt2OverPi * (v + kCubic * v * v * v)) : erff(v * kInvSqrt2);
    y[i] = store<T>(0.5f * v * (1.0f + s));
  }
}

template <class T>
__global__ void gelu_backward_kernel(T* __restrict__ dx, const T* __restrict__ dy, const T* __restrict__ x,
                                     std::int64_t n, GeluForm form) {
  TIDAL_CUDA_FOR(i, n) {
    const float v = load(x[i]);
    float g;
    if (form == GeluForm::tanh) {
      const float t = tanhf(kSqrt2OverPi * (v + kCubic * v * v * v));
      const float dt = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v) * (1.0f - t * t);
      g = 0.5f * (1.0f + t) + 0.5f * v * dt;
    } else {
      g = 0.5f * (1.0f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
    }
    dx[i] = store<T>(load(dy[i]) * g);
  }
}

}  // namespace

// ---- launchers ----

void gelu_forward(Tensor& y, const Tensor& x, GeluForm form) {
  expect_cuda_contiguous({&x, &y}, "gelu");
  expect_same(y, x, "gelu y/x");
  const std::int64_t n = x.numel();
  if (n == 0) return;
  with_float_type(x.dtype(), [&]<class T>() {
    gelu_forward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(y), ptr<T>(x), n, form);
  });
  TIDAL_CUDA_CHECK_LAUNCH("gelu_forward_kernel");
}

void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, GeluForm form) {
  expect_cuda_contiguous({&x, &dx, &dy}, "gelu backward");
  expect_same(dx, x, "gelu dx/x");
  expect_same(dy, x, "gelu dy/x");
  const std::int64_t n = x.numel();
  if (n == 0) return;
  with_float_type(x.dtype(), [&]<class T>() {
    gelu_backward_kernel<T>
        <<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(dx), ptr<T>(dy), ptr<T>(x), n, form);
  });
  TIDAL_CUDA_CHECK_LAUNCH("gelu_backward_kernel");
}

}  // namespace tidal::ops::cuda
