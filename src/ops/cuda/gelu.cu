#include "ops/gelu.h"

#include "ops/cuda/common.cuh"

namespace tidal::ops::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// ---- kernels ----

// The tanh form through the logistic function, as ops/cpu/gelu.cpp (why there):
// 0.5 (1 + tanh u) = s = sigmoid(2u) and 0.5 (1 - tanh^2 u) = 2 s (1 - s), from e = exp(-2|u|).
struct TanhFormParts {
  float s, one_minus_s;
};
__device__ __forceinline__ TanhFormParts tanh_form_parts(float v) {
  const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
  const float e = expf(-2.0f * fabsf(u));
  const float r = 1.0f / (1.0f + e);
  return u >= 0.0f ? TanhFormParts{r, e * r} : TanhFormParts{e * r, r};
}

struct GeluForward {
  GeluForm form;
  __device__ float operator()(float v) const {
    return form == GeluForm::tanh ? v * tanh_form_parts(v).s : 0.5f * v * (1.0f + erff(v * kInvSqrt2));
  }
};

// dx = dy * gelu'(x).
struct GeluBackward {
  GeluForm form;
  __device__ float operator()(float dy, float v) const {
    float g;
    if (form == GeluForm::tanh) {
      const TanhFormParts p = tanh_form_parts(v);
      g = p.s + 2.0f * kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v) * v * p.s * p.one_minus_s;
    } else {
      g = 0.5f * (1.0f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
    }
    return dy * g;
  }
};

}  // namespace

// ---- launchers ----

void gelu_forward(Tensor& y, const Tensor& x, GeluForm form) {
  expect_cuda_contiguous({&x, &y}, "gelu");
  expect_same(y, x, "gelu y/x");
  const std::int64_t n = x.numel();
  if (n == 0) return;
  with_float_type(x.dtype(), [&]<class T>() { map_elements(ptr<T>(y), n, GeluForward{form}, ptr<T>(x)); });
  TIDAL_CUDA_CHECK_LAUNCH("gelu_forward map_kernel");
}

void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, GeluForm form) {
  expect_cuda_contiguous({&x, &dx, &dy}, "gelu backward");
  expect_same(dx, x, "gelu dx/x");
  expect_same(dy, x, "gelu dy/x");
  const std::int64_t n = x.numel();
  if (n == 0) return;
  with_float_type(x.dtype(), [&]<class T>() {
    map_elements(ptr<T>(dx), n, GeluBackward{form}, ptr<T>(dy), ptr<T>(x));
  });
  TIDAL_CUDA_CHECK_LAUNCH("gelu_backward map_kernel");
}

}  // namespace tidal::ops::cuda
