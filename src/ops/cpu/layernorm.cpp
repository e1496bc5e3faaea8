#include "ops/layernorm.h"

#include "ops/cpu/typed.h"

#include <omp.h>

#include <cmath>
#include <vector>

namespace tidal::ops::cpu {

void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps) {
  expect_cpu_contiguous({&y, &mean, &rstd, &x, &w, &b}, "layernorm_forward operand");
  expect_same(y, x, "layernorm_forward y/x");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  TIDAL_ASSERT(w.numel() == C && b.numel() == C && mean.numel() == N && rstd.numel() == N,
               "layernorm_forward shapes x {} w {} mean {}", x.str(), w.str(), mean.str());
  with_float_type(x.dtype(), [&]<class T>() {
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pb = b.data<T>();
    T* py = y.data<T>();
    float* pm = mean.data<float>();
    float* pr = rstd.data<float>();
#pragma omp parallel for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const T* xr = px + n * C;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (std::int64_t c = 0; c < C; ++c) sum += to_float(xr[c]);
      const float mu = sum / float(C);
      float var = 0.0f;
#pragma omp simd reduction(+ : var)
      for (std::int64_t c = 0; c < C; ++c) {
        const float d = to_float(xr[c]) - mu;
        var += d * d;
      }
      const float rs = 1.0f / std::sqrt(var / float(C) + eps);
      T* yr = py + n * C;
#pragma omp simd
      for (std::int64_t c = 0; c < C; ++c)
        yr[c] = from_float<T>((to_float(xr[c]) - mu) * rs * to_float(pw[c]) + to_float(pb[c]));
      pm[n] = mu;
      pr[n] = rs;
    }
  });
}

void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd) {
  expect_cpu_contiguous({&dx, &dw, &db, &dy, &x, &w, &mean, &rstd}, "layernorm_backward operand");
  expect_same(dx, x, "layernorm_backward dx/x");
  expect_same(dy, x, "layernorm_backward dy/x");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  TIDAL_ASSERT(dw.dtype() == db.dtype(), "layernorm_backward dw {} db {}", dw.str(), db.str());
  with_gradient_types(x.dtype(), dw.dtype(), [&]<class T, class G>() {
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    const float* pm = mean.data<float>();
    const float* pr = rstd.data<float>();
    // Per-thread fp32 partial sums of dw and db, reduced in thread order afterwards: the result
    // is rounded to T once and does not depend on thread timing (bitwise reproducible).
    const int nthreads = omp_get_max_threads();
    std::vector<float> partial(std::size_t(nthreads) * 2 * std::size_t(C), 0.0f);
#pragma omp parallel num_threads(nthreads)
    {
      float* dw_acc = partial.data() + std::size_t(omp_get_thread_num()) * 2 * std::size_t(C);
      float* db_acc = dw_acc + C;
#pragma omp for schedule(static)
      for (std::int64_t n = 0; n < N; ++n) {
        const T* xr = px + n * C;
        const T* dyr = pdy + n * C;
        const float mu = pm[n], rs = pr[n];
        float sum_g = 0.0f, sum_gx = 0.0f;  // sums of g = dy*w and g * xhat
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (std::int64_t c = 0; c < C; ++c) {
          const float xhat = (to_float(xr[c]) - mu) * rs;
          const float d = to_float(dyr[c]);
          const float g = d * to_float(pw[c]);
          sum_g += g;
          sum_gx += g * xhat;
          dw_acc[c] += d * xhat;
          db_acc[c] += d;
        }
        const float mg = sum_g / float(C), mgx = sum_gx / float(C);
        T* dxr = pdx + n * C;
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) {
          const float xhat = (to_float(xr[c]) - mu) * rs;
          dxr[c] = from_float<T>((to_float(dyr[c]) * to_float(pw[c]) - mg - xhat * mgx) * rs);
        }
      }
    }
    G* pdw = dw.data<G>();
    G* pdb = db.data<G>();
    for (std::int64_t c = 0; c < C; ++c) {
      float sw = to_float(pdw[c]), sb = to_float(pdb[c]);
      for (int t = 0; t < nthreads; ++t) {
        sw += partial[std::size_t(t) * 2 * std::size_t(C) + std::size_t(c)];
        sb += partial[std::size_t(t) * 2 * std::size_t(C) + std::size_t(C + c)];
      }
      pdw[c] = from_float<G>(sw);
      pdb[c] = from_float<G>(sb);
    }
  });
}

}  // namespace tidal::ops::cpu
