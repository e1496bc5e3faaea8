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
#pragma omp declare simd notinbranch
inline float gelu_tanh(float v) { return 0.5f * v * (1.0f + tanh_fast(kSqrt2OverPi * (v + kCubic * v * v * v))); }
#pragma omp declare simd notinbranch
inline float gelu_tanh_grad(float v) {
  const float t = tanh_fast(kSqrt2OverPi * (v + kCubic * v * v * v));
  const float dt = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v) * (1.0f - t * t);
  return 0.5f * (1.0f + t) + 0.5f * v * dt;
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
