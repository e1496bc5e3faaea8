// Residual add, accumulation and scaling on the GPU: one fp32 operation per element, rounded
// once, so the result is bitwise the CPU backend's.
#include "ops/residual.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;

// ---- kernels ----

// No __restrict__: y may alias a or b (accumulate is y = y + x). Each element is read and then
// written by the same thread, so aliasing is safe.
template <class T>
__global__ void residual_add_kernel(T* y, const T* a, const T* b, std::int64_t n) {
  TIDAL_CUDA_FOR(i, n) { y[i] = store<T>(load(a[i]) + load(b[i])); }
}

template <class T>
__global__ void scale_kernel(T* y, float s, std::int64_t n) {
  TIDAL_CUDA_FOR(i, n) { y[i] = store<T>(load(y[i]) * s); }
}

}  // namespace

// ---- launchers ----

void residual_add(Tensor& y, const Tensor& a, const Tensor& b) {
  expect_cuda_contiguous({&y, &a, &b}, "residual_add operand");
  expect_same(y, a, "residual_add y/a");
  expect_same(y, b, "residual_add y/b");
  const std::int64_t n = y.numel();
  if (n == 0) return;
  with_float_type(y.dtype(), [&]<class T>() {
    residual_add_kernel<T>
        <<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(y), ptr<T>(a), ptr<T>(b), n);
  });
  TIDAL_CUDA_CHECK_LAUNCH("residual_add_kernel");
}

void accumulate(Tensor& y, const Tensor& x) { residual_add(y, y, x); }

void scale(Tensor& y, float s) {
  expect_cuda_contiguous(y, "scale y");
  const std::int64_t n = y.numel();
  if (n == 0) return;
  with_float_type(y.dtype(), [&]<class T>() {
    scale_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(ptr<T>(y), s, n);
  });
  TIDAL_CUDA_CHECK_LAUNCH("scale_kernel");
}

}  // namespace tidal::ops::cuda
