#include "ops/gelu.h"

#include "ops/cpu/typed.h"
#include "ops/cpu/vec_math.h"

namespace tidal::ops::cpu {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
}  // namespace

void gelu_forward(Tensor& y, const Tensor& x) {
  expect_cpu_contiguous(x, "gelu x");
  expect_cpu_contiguous(y, "gelu y");
  expect_same(y, x, "gelu y/x");
  const std::int64_t n = x.numel();
  with_float_type(x.dtype(), [&]<class T>() {
    const T* px = x.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = to_float(px[i]);
      py[i] = from_float<T>(0.5f * v * (1.0f + tanh_fast(kSqrt2OverPi * (v + kCubic * v * v * v))));
    }
  });
}

void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  expect_cpu_contiguous(x, "gelu x");
  expect_cpu_contiguous(dx, "gelu dx");
  expect_cpu_contiguous(dy, "gelu dy");
  expect_same(dx, x, "gelu dx/x");
  expect_same(dy, x, "gelu dy/x");
  const std::int64_t n = x.numel();
  with_float_type(x.dtype(), [&]<class T>() {
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = to_float(px[i]);
      const float t = tanh_fast(kSqrt2OverPi * (v + kCubic * v * v * v));
      const float dt = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v) * (1.0f - t * t);
      pdx[i] = from_float<T>(to_float(pdy[i]) * (0.5f * (1.0f + t) + 0.5f * v * dt));
    }
  });
}

}  // namespace tidal::ops::cpu
