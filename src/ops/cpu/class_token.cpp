#include "ops/class_token.h"

#include "ops/cpu/typed.h"

#include <cstring>

namespace tidal::ops::cpu {

void prepend_token(Tensor& y, const Tensor& x, const Tensor& token) {
  expect_cpu_contiguous({&y, &x, &token}, "prepend_token operand");
  const std::int64_t B = x.dim(0), N = x.dim(1), D = x.dim(2);
  TIDAL_ASSERT(y.shape() == Shape({B, N + 1, D}) && token.numel() == D && y.dtype() == x.dtype() &&
                   token.dtype() == x.dtype(),
               "prepend_token y {} x {} token {}", y.str(), x.str(), token.str());
  const std::size_t row = std::size_t(D) * dtype_size(x.dtype());
  auto* py = static_cast<std::byte*>(y.raw());
  const auto* px = static_cast<const std::byte*>(x.raw());
  for (std::int64_t b = 0; b < B; ++b) {
    std::memcpy(py + std::size_t(b * (N + 1)) * row, token.raw(), row);
    std::memcpy(py + std::size_t(b * (N + 1) + 1) * row, px + std::size_t(b * N) * row, std::size_t(N) * row);
  }
}

void prepend_token_backward(Tensor& dx, Tensor& dtoken, const Tensor& dy) {
  expect_cpu_contiguous({&dx, &dtoken, &dy}, "prepend_token_backward operand");
  const std::int64_t B = dx.dim(0), N = dx.dim(1), D = dx.dim(2);
  TIDAL_ASSERT(dy.shape() == Shape({B, N + 1, D}) && dtoken.numel() == D, "prepend_token_backward dy {}", dy.str());
  with_gradient_types(dy.dtype(), dtoken.dtype(), [&]<class T, class G>() {
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    G* pdt = dtoken.data<G>();
    for (std::int64_t b = 0; b < B; ++b) {
      const T* rows = pdy + b * (N + 1) * D;
      for (std::int64_t d = 0; d < D; ++d) pdt[d] = from_float<G>(to_float(pdt[d]) + to_float(rows[d]));
      std::memcpy(pdx + b * N * D, rows + D, std::size_t(N * D) * sizeof(T));
    }
  });
}

void select_token(Tensor& y, const Tensor& x, std::int64_t index) {
  expect_cpu_contiguous({&y, &x}, "select_token operand");
  const std::int64_t B = x.dim(0), T = x.dim(1), D = x.dim(2);
  TIDAL_ASSERT(y.shape() == Shape({B, D}) && index >= 0 && index < T, "select_token y {} x {}", y.str(), x.str());
  const std::size_t row = std::size_t(D) * dtype_size(x.dtype());
  for (std::int64_t b = 0; b < B; ++b)
    std::memcpy(static_cast<std::byte*>(y.raw()) + std::size_t(b) * row,
                static_cast<const std::byte*>(x.raw()) + std::size_t(b * T + index) * row, row);
}

void select_token_backward(Tensor& dx, const Tensor& dy, std::int64_t index) {
  expect_cpu_contiguous({&dx, &dy}, "select_token_backward operand");
  const std::int64_t B = dx.dim(0), T = dx.dim(1), D = dx.dim(2);
  TIDAL_ASSERT(dy.shape() == Shape({B, D}) && index >= 0 && index < T, "select_token_backward dx {}", dx.str());
  dx.zero_();
  const std::size_t row = std::size_t(D) * dtype_size(dx.dtype());
  for (std::int64_t b = 0; b < B; ++b)
    std::memcpy(static_cast<std::byte*>(dx.raw()) + std::size_t(b * T + index) * row,
                static_cast<const std::byte*>(dy.raw()) + std::size_t(b) * row, row);
}

}  // namespace tidal::ops::cpu
