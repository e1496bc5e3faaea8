// RMSNorm on the CPU (ops/rms_norm.h), as Hugging Face's LlamaRMSNorm computes it: the mean of
// squares in fp32, x * rsqrt(mean + eps), then the weight. Rows run in parallel; dw is summed
// per thread and the partials added in thread order, so it is bitwise reproducible.
#include "ops/rms_norm.h"

#include "ops/cpu/typed.h"

#include <omp.h>

#include <cmath>
#include <vector>

namespace tidal::ops::cpu {
namespace {

void expect_rms_shapes(const Tensor& x, const Tensor& w, const Tensor& rstd, const char* what) {
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  TIDAL_ASSERT(w.numel() == C && rstd.numel() == N && w.dtype() == DType::f32 && rstd.dtype() == DType::f32,
               "{} shapes: x {} w {} rstd {} (w [C] and rstd [N] fp32)", what, x.str(), w.str(), rstd.str());
}

}  // namespace

void rms_norm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  expect_cpu_contiguous({&y, &rstd, &x, &w}, "rms_norm_forward operand");
  expect_same(y, x, "rms_norm_forward y/x");
  expect_rms_shapes(x, w, rstd, "rms_norm_forward");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  with_float_type(x.dtype(), [&]<class T>() {
    const T* px = x.data<T>();
    const float* pw = w.data<float>();
    T* py = y.data<T>();
    float* pr = rstd.data<float>();
#pragma omp parallel for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const T* xr = px + n * C;
      float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
      for (std::int64_t c = 0; c < C; ++c) {
        const float v = to_float(xr[c]);
        sum_sq += v * v;
      }
      const float rs = 1.0f / std::sqrt(sum_sq / float(C) + eps);
      T* yr = py + n * C;
      // (x * rstd) * w: LlamaRMSNorm's order of the two products.
#pragma omp simd
      for (std::int64_t c = 0; c < C; ++c) yr[c] = from_float<T>(to_float(xr[c]) * rs * pw[c]);
      pr[n] = rs;
    }
  });
}

// With g = w * dy and xhat = x * rstd: dx = rstd (g - xhat mean(g xhat)) (the mean-free
// LayerNorm backward), dw += sum over rows of dy xhat.
void rms_norm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  expect_cpu_contiguous({&dx, &dw, &dy, &x, &w, &rstd}, "rms_norm_backward operand");
  expect_same(dx, x, "rms_norm_backward dx/x");
  expect_same(dy, x, "rms_norm_backward dy/x");
  expect_same(dw, w, "rms_norm_backward dw/w");
  expect_rms_shapes(x, w, rstd, "rms_norm_backward");
  const std::int64_t C = x.dim(-1), N = rows_of(x);
  with_float_type(x.dtype(), [&]<class T>() {
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    const float* pw = w.data<float>();
    const float* pr = rstd.data<float>();
    T* pdx = dx.data<T>();
    const int nthreads = omp_get_max_threads();
    std::vector<float> partial(std::size_t(nthreads) * std::size_t(C), 0.0f);
#pragma omp parallel num_threads(nthreads)
    {
      float* dw_acc = partial.data() + std::size_t(omp_get_thread_num()) * std::size_t(C);
#pragma omp for schedule(static)
      for (std::int64_t n = 0; n < N; ++n) {
        const T* xr = px + n * C;
        const T* dyr = pdy + n * C;
        const float rs = pr[n];
        // dw's terms are taken in this first pass: dx may alias x or dy and is written after it.
        float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
        for (std::int64_t c = 0; c < C; ++c) {
          const float xhat = to_float(xr[c]) * rs;
          const float d = to_float(dyr[c]);
          sum_gx += d * pw[c] * xhat;
          dw_acc[c] += d * xhat;
        }
        const float mgx = sum_gx / float(C);
        T* dxr = pdx + n * C;
#pragma omp simd
        for (std::int64_t c = 0; c < C; ++c) {
          const float xhat = to_float(xr[c]) * rs;
          dxr[c] = from_float<T>((to_float(dyr[c]) * pw[c] - xhat * mgx) * rs);
        }
      }
    }
    float* pdw = dw.data<float>();
    for (std::int64_t c = 0; c < C; ++c) {
      float s = pdw[c];
      for (int t = 0; t < nthreads; ++t) s += partial[std::size_t(t) * std::size_t(C) + std::size_t(c)];
      pdw[c] = s;
    }
  });
}

}  // namespace tidal::ops::cpu
