#include "ops/gelu.h"

#include "ops/cpu/typed.h"
#include "ops/cpu/vec_math.h"

namespace tidal::ops::cpu {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// y = f(x) and dy/dx for each form, on one element.
// The tanh form through the logistic function: 0.5 (1 + tanh u) = s = sigmoid(2u), and
// 0.5 (1 - tanh^2 u) = 2 s (1 - s). Written with tanh, 1 + tanh u cancels where x << 0 and the
// gradient there kept only absolute accuracy (~3e-7; off by 2x at x ~ -4.5); s keeps fp32's
// relative accuracy. s and 1 - s both from e = exp(-2|u|) <= 1 (no overflow).
#pragma omp declare simd notinbranch
inline void gelu_tanh_parts(float v, float& s, float& one_minus_s) {
  const float u = kSqrt2OverPi * (v + kCubic * v * v * v);
  const float e = exp_fast(-2.0f * __builtin_fabsf(u));
  const float r = 1.0f / (1.0f + e);
  s = u >= 0.0f ? r : e * r;
  one_minus_s = u >= 0.0f ? e * r : r;
}
#pragma omp declare simd notinbranch
inline float gelu_tanh(float v) {
  float s, one_minus_s;
  gelu_tanh_parts(v, s, one_minus_s);
  return v * s;
}
#pragma omp declare simd notinbranch
inline float gelu_tanh_grad(float v) {
  float s, one_minus_s;
  gelu_tanh_parts(v, s, one_minus_s);
  return s + 2.0f * kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v) * v * s * one_minus_s;
}
#pragma omp declare simd notinbranch
inline float gelu_erf(float v) { return 0.5f * v * (1.0f + erf_fast(v * kInvSqrt2)); }
#pragma omp declare simd notinbranch
inline float gelu_erf_grad(float v) {
  return 0.5f * (1.0f + erf_fast(v * kInvSqrt2)) + v * kInvSqrt2Pi * exp_fast(-0.5f * v * v);
}

template <class T, class F>
void map(T* py, const T* px, std::int64_t n, F f) {
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) py[i] = from_float<T>(f(to_float(px[i])));
}

template <class T, class G>
void map_grad(T* pdx, const T* pdy, const T* px, std::int64_t n, G g) {
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) pdx[i] = from_float<T>(to_float(pdy[i]) * g(to_float(px[i])));
}

}  // namespace

void gelu_forward(Tensor& y, const Tensor& x, GeluForm form) {
  expect_cpu_contiguous(x, "gelu x");
  expect_cpu_contiguous(y, "gelu y");
  expect_same(y, x, "gelu y/x");
  with_float_type(x.dtype(), [&]<class T>() {
    if (form == GeluForm::tanh) map(y.data<T>(), x.data<T>(), x.numel(), [](float v) { return gelu_tanh(v); });
    else map(y.data<T>(), x.data<T>(), x.numel(), [](float v) { return gelu_erf(v); });
  });
}

void gelu_backward(Tensor& dx, const Tensor& dy, const Tensor& x, GeluForm form) {
  expect_cpu_contiguous(x, "gelu x");
  expect_cpu_contiguous(dx, "gelu dx");
  expect_cpu_contiguous(dy, "gelu dy");
  expect_same(dx, x, "gelu dx/x");
  expect_same(dy, x, "gelu dy/x");
  with_float_type(x.dtype(), [&]<class T>() {
    if (form == GeluForm::tanh)
      map_grad(dx.data<T>(), dy.data<T>(), x.data<T>(), x.numel(), [](float v) { return gelu_tanh_grad(v); });
    else map_grad(dx.data<T>(), dy.data<T>(), x.data<T>(), x.numel(), [](float v) { return gelu_erf_grad(v); });
  });
}

}  // namespace tidal::ops::cpu
