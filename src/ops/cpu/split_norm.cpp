// A split norm's row products on the CPU (ops/split_norm.h, which checks the shapes). The rows'
// sums accumulate in double and are stored as fp32 (what the group sums); the weight gradients add
// the rows in order for each column, columns in parallel.
#include "ops/split_norm.h"

#include "ops/cpu/typed.h"

#include <algorithm>
#include <cmath>

namespace tidal::ops::cpu {
void split_norm_sums(Tensor& stats, const Tensor& x, const SplitNormOptions& opt) {
  expect_cpu_contiguous({&stats, &x}, "split_norm_sums operand");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  const float* px = x.data<float>();
  float* ps = stats.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < N; ++r) {
    double s = 0, s2 = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double v = px[r * C + c];
      s += v;
      s2 += v * v;
    }
    ps[2 * r] = opt.centered ? float(s) : 0.0f;
    ps[2 * r + 1] = float(s2);
  }
}

void split_norm_forward(Tensor& y, Tensor& stats, const Tensor& x, const Tensor& w, const Tensor& b,
                        const SplitNormOptions& opt) {
  expect_cpu_contiguous({&y, &stats, &x, &w}, "split_norm_forward operand");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  const float *px = x.data<float>(), *pw = w.data<float>(), *pb = b.defined() ? b.data<float>() : nullptr;
  float *py = y.data<float>(), *ps = stats.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < N; ++r) {
    const double mean = ps[2 * r] / double(opt.full);
    const double var = std::max(0.0, ps[2 * r + 1] / double(opt.full) - mean * mean);
    const float m = float(mean), inv = float(1.0 / std::sqrt(var + opt.eps));
    for (std::int64_t c = 0; c < C; ++c) {
      const float h = (px[r * C + c] - m) * inv;
      py[r * C + c] = pb ? h * pw[c] + pb[c] : h * pw[c];
    }
    ps[2 * r] = m;
    ps[2 * r + 1] = inv;
  }
}

void split_norm_weight_grads(Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& stats) {
  expect_cpu_contiguous({&dw, &dy, &x, &stats}, "split_norm_weight_grads operand");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  const float *pd = dy.data<float>(), *px = x.data<float>(), *ps = stats.data<float>();
  float *pw = dw.data<float>(), *pb = db.defined() ? db.data<float>() : nullptr;
  constexpr std::int64_t kColumns = 64;  // a block of columns a thread adds up, row by row
#pragma omp parallel for schedule(static)
  for (std::int64_t c0 = 0; c0 < C; c0 += kColumns) {
    const std::int64_t c1 = std::min(C, c0 + kColumns);
    for (std::int64_t r = 0; r < N; ++r) {
      const float m = ps[2 * r], inv = ps[2 * r + 1];
      for (std::int64_t c = c0; c < c1; ++c) {
        pw[c] += pd[r * C + c] * ((px[r * C + c] - m) * inv);
        if (pb) pb[c] += pd[r * C + c];
      }
    }
  }
}

void split_norm_grad_sums(Tensor& sums, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                          const SplitNormOptions& opt) {
  expect_cpu_contiguous({&sums, &dy, &x, &stats, &w}, "split_norm_grad_sums operand");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  const float *pd = dy.data<float>(), *px = x.data<float>(), *ps = stats.data<float>(), *pw = w.data<float>();
  float* pg = sums.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < N; ++r) {
    const float m = ps[2 * r], inv = ps[2 * r + 1];
    double s = 0, sh = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double g = double(pd[r * C + c]) * pw[c];
      s += g;
      sh += g * ((px[r * C + c] - m) * inv);
    }
    pg[2 * r] = opt.centered ? float(s) : 0.0f;
    pg[2 * r + 1] = float(sh);
  }
}

void split_norm_backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& stats, const Tensor& w,
                         const Tensor& sums, const SplitNormOptions& opt) {
  expect_cpu_contiguous({&dx, &dy, &x, &stats, &w, &sums}, "split_norm_backward operand");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  const float *pd = dy.data<float>(), *px = x.data<float>(), *ps = stats.data<float>(), *pw = w.data<float>(),
              *pg = sums.data<float>();
  float* pdx = dx.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < N; ++r) {
    const float m = ps[2 * r], inv = ps[2 * r + 1];
    const float mg = pg[2 * r] / float(opt.full), mgh = pg[2 * r + 1] / float(opt.full);
    for (std::int64_t c = 0; c < C; ++c)
      pdx[r * C + c] = inv * (pd[r * C + c] * pw[c] - mg - ((px[r * C + c] - m) * inv) * mgh);
  }
}

}  // namespace tidal::ops::cpu
