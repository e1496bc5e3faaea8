#include "ops/softmax.h"

#include "ops/cpu/softmax_row.h"
#include "ops/cpu/typed.h"

namespace tidal::ops::cpu {

void softmax_forward(Tensor& y, const Tensor& x) {
  expect_cpu_contiguous(x, "softmax x");
  expect_cpu_contiguous(y, "softmax y");
  expect_same(y, x, "softmax y/x");
  TIDAL_ASSERT(x.dtype() == DType::f32, "softmax on {}", x.str());
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  const float* px = x.data<float>();
  float* py = y.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < N; ++n) softmax_row(py + n * C, px + n * C, C, 0, C, nullptr);
}

void softmax_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  expect_cpu_contiguous(y, "softmax y");
  expect_cpu_contiguous(dy, "softmax dy");
  expect_cpu_contiguous(dx, "softmax dx");
  expect_same(dy, y, "softmax dy/y");
  expect_same(dx, y, "softmax dx/y");
  TIDAL_ASSERT(y.dtype() == DType::f32, "softmax on {}", y.str());
  const std::int64_t C = y.dim(-1), N = rows_of(y);
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < N; ++n)
    softmax_row_backward(dx.data<float>() + n * C, dy.data<float>() + n * C, y.data<float>() + n * C, C);
}

}  // namespace tidal::ops::cpu
