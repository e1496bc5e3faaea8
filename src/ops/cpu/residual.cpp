#include "ops/residual.h"

#include "ops/cpu/typed.h"

namespace tidal::ops::cpu {

void residual_add(Tensor& y, const Tensor& a, const Tensor& b) {
  expect_cpu_contiguous({&y, &a, &b}, "residual_add operand");
  expect_same(y, a, "residual_add y/a");
  expect_same(y, b, "residual_add y/b");
  const std::int64_t n = y.numel();
  with_float_type(y.dtype(), [&]<class T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) py[i] = from_float<T>(to_float(pa[i]) + to_float(pb[i]));
  });
}

void accumulate(Tensor& y, const Tensor& x) {
  if (y.dtype() == x.dtype()) return residual_add(y, y, x);
  expect_cpu_contiguous({&y, &x}, "accumulate operand");
  TIDAL_ASSERT(y.shape() == x.shape(), "accumulate {} += {}", y.str(), x.str());
  const std::int64_t n = y.numel();
  with_gradient_types(x.dtype(), y.dtype(), [&]<class T, class G>() {
    const T* px = x.data<T>();
    G* py = y.data<G>();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) py[i] = from_float<G>(to_float(py[i]) + to_float(px[i]));
  });
}

void scale(Tensor& y, float s) {
  expect_cpu_contiguous(y, "scale y");
  const std::int64_t n = y.numel();
  with_float_type(y.dtype(), [&]<class T>() {
    T* py = y.data<T>();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) py[i] = from_float<T>(to_float(py[i]) * s);
  });
}

}  // namespace tidal::ops::cpu
