#include "ops/grad_norm.h"

#include "ops/cpu/typed.h"


namespace tidal::ops {

namespace cpu {
double sum_of_squares(const Tensor& x) {
  expect_cpu_contiguous(x, "sum_of_squares x");
  const std::int64_t n = x.numel();
  double total = 0.0;
  with_float_type(x.dtype(), [&]<class T>() {
    const T* p = x.data<T>();
#pragma omp parallel for simd reduction(+ : total) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = to_float(p[i]);
      total += v * v;
    }
  });
  return total;
}
}  // namespace cpu

}  // namespace tidal::ops
