// Residual add, accumulation and scaling on the GPU: one fp32 operation per element, rounded
// once, so the result is bitwise the CPU backend's.
#include "ops/residual.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

struct Scale {
  float s;
  __device__ float operator()(float x) const { return x * s; }
};

}  // namespace

// ---- launchers ----

void residual_add(Tensor& y, const Tensor& a, const Tensor& b) {
  expect_cuda_contiguous({&y, &a, &b}, "residual_add operand");
  expect_same(y, a, "residual_add y/a");
  expect_same(y, b, "residual_add y/b");
  const std::int64_t n = y.numel();
  if (n == 0) return;
  // y may alias a or b (accumulate is y = y + x): map_elements allows it.
  with_float_type(y.dtype(), [&]<class T>() { map_elements(ptr<T>(y), n, Add{}, ptr<T>(a), ptr<T>(b)); });
  TIDAL_CUDA_CHECK_LAUNCH("residual_add map_kernel");
}

void accumulate(Tensor& y, const Tensor& x) { residual_add(y, y, x); }

void scale(Tensor& y, float s) {
  expect_cuda_contiguous(y, "scale y");
  const std::int64_t n = y.numel();
  if (n == 0) return;
  with_float_type(y.dtype(), [&]<class T>() { map_elements(ptr<T>(y), n, Scale{s}, ptr<T>(y)); });
  TIDAL_CUDA_CHECK_LAUNCH("scale map_kernel");
}

}  // namespace tidal::ops::cuda
