#include "ops/bias.h"

#include "ops/cpu/typed.h"

#include <vector>

namespace tidal::ops::cpu {

void bias_add(Tensor& y, const Tensor& b) {
  expect_cpu_contiguous(y, "bias_add y");
  expect_cpu_contiguous(b, "bias_add b");
  const std::int64_t C = b.numel(), N = rows_of(y);
  TIDAL_ASSERT(y.dim(-1) == C && y.dtype() == b.dtype(), "bias_add {} + {}", y.str(), b.str());
  with_float_type(y.dtype(), [&]<class T>() {
    T* py = y.data<T>();
    const T* pb = b.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t c = 0; c < C; ++c) py[n * C + c] = from_float<T>(to_float(py[n * C + c]) + to_float(pb[c]));
  });
}

void bias_grad(Tensor& db, const Tensor& dy) {
  expect_cpu_contiguous(db, "bias_grad db");
  expect_cpu_contiguous(dy, "bias_grad dy");
  const std::int64_t C = db.numel(), N = rows_of(dy);
  TIDAL_ASSERT(dy.dim(-1) == C, "bias_grad {} from {}", db.str(), dy.str());
  with_gradient_types(dy.dtype(), db.dtype(), [&]<class T, class G>() {
    const T* pdy = dy.data<T>();
    G* pdb = db.data<G>();
    // Each thread owns a block of columns and sums down the rows: no reduction races.
#pragma omp parallel
    {
      std::vector<float> acc;
#pragma omp for schedule(static)
      for (std::int64_t c0 = 0; c0 < C; c0 += 64) {
        const std::int64_t c1 = std::min(C, c0 + 64);
        acc.assign(std::size_t(c1 - c0), 0.0f);
        for (std::int64_t n = 0; n < N; ++n)
          for (std::int64_t c = c0; c < c1; ++c) acc[std::size_t(c - c0)] += to_float(pdy[n * C + c]);
        for (std::int64_t c = c0; c < c1; ++c) pdb[c] = from_float<G>(to_float(pdb[c]) + acc[std::size_t(c - c0)]);
      }
    }
  });
}

}  // namespace tidal::ops::cpu
