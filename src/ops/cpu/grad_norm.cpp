#include "ops/grad_norm.h"

#include "ops/cpu/typed.h"

#include <algorithm>
#include <vector>


namespace tidal::ops {

namespace cpu {
double sum_of_squares(const Tensor& x) {
  expect_cpu_contiguous(x, "sum_of_squares x");
  const std::int64_t n = x.numel();
  // Fixed blocks summed in order: the same value whatever the thread count or timing, so
  // clipping (and hence training) is bitwise reproducible.
  constexpr std::int64_t kBlock = 1 << 14;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(std::size_t(blocks), 0.0);
  with_float_type(x.dtype(), [&]<class T>() {
    const T* p = x.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t b = 0; b < blocks; ++b) {
      double s = 0.0;
      // Vector lanes summed in an order fixed at compile time (a serial sum of doubles waits on
      // each add: it was half the optimizer's time in a step).
      const std::int64_t end = std::min(n, (b + 1) * kBlock);
#pragma omp simd reduction(+ : s)
      for (std::int64_t i = b * kBlock; i < end; ++i) {
        const double v = to_float(p[i]);
        s += v * v;
      }
      partial[std::size_t(b)] = s;
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}
}  // namespace cpu

}  // namespace tidal::ops
