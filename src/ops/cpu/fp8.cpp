#include "ops/fp8.h"

#include "ops/cpu/typed.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tidal::ops::cpu {
namespace {

// The largest |x|, NaN when any element is.
template <class T>
float amax_of(const T* x, std::int64_t n) {
  float m = 0.0f;
  bool nan = false;
#pragma omp parallel for reduction(max : m) reduction(|| : nan) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = std::fabs(to_float(x[i]));
    nan = nan || std::isnan(v);
    m = std::max(m, v);
  }
  return nan ? std::nanf("") : m;
}

}  // namespace

void fp8_quantize(Tensor& q, Tensor& scale_inv, const Tensor& x, Fp8Format format, bool transpose) {
  expect_cpu_contiguous({&q, &scale_inv, &x}, "fp8_quantize");
  const Fp8QuantizeDims d = fp8_quantize_dims(q, scale_inv, x, transpose);
  with_float_type(x.dtype(), [&]<class T>() {
    const T* in = x.data<T>();
    const float scale = fp8_scale(amax_of(in, d.rows * d.cols), format);
    std::uint8_t* out = q.data<std::uint8_t>();
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < d.rows; ++r)
      for (std::int64_t c = 0; c < d.cols; ++c)
        out[transpose ? c * d.rows + r : r * d.cols + c] = to_fp8(to_float(in[r * d.cols + c]) * scale, format);
    scale_inv.data<float>()[0] = 1.0f / scale;
  });
}

// Each product exact in double (an fp8 code has at most 4 significant bits), summed in double,
// scaled, beta c added, and rounded once.
void gemm_fp8(Tensor& c, const Tensor& a, const Tensor& a_scale_inv, Fp8Format a_format, const Tensor& b,
              const Tensor& b_scale_inv, Fp8Format b_format, float beta) {
  expect_cpu_contiguous({&c, &a, &a_scale_inv, &b, &b_scale_inv}, "gemm_fp8");
  const Fp8GemmDims d = fp8_gemm_dims(c, a, a_scale_inv, b, b_scale_inv);
  std::vector<double> av(std::size_t(d.m * d.k)), bv(std::size_t(d.n * d.k));
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = from_fp8(a.data<std::uint8_t>()[i], a_format);
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = from_fp8(b.data<std::uint8_t>()[i], b_format);
  const double scale = double(a_scale_inv.data<float>()[0]) * double(b_scale_inv.data<float>()[0]);
  with_float_type(c.dtype(), [&]<class T>() {
    T* out = c.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < d.m; ++i)
      for (std::int64_t j = 0; j < d.n; ++j) {
        double sum = 0.0;
        for (std::int64_t p = 0; p < d.k; ++p) sum += av[std::size_t(i * d.k + p)] * bv[std::size_t(j * d.k + p)];
        const double old = beta == 0.0f ? 0.0 : double(beta) * to_float(out[i * d.n + j]);
        out[i * d.n + j] = from_float<T>(float(sum * scale + old));
      }
  });
}

}  // namespace tidal::ops::cpu
