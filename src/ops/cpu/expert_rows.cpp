// The row moves of a mixture of experts on the CPU (ops/expert_rows.h): a row per iteration, rows
// in parallel, fp32 sums in pick order.
#include "ops/expert_rows.h"

#include "ops/cpu/typed.h"

#include <algorithm>

namespace tidal::ops::cpu {
namespace {

void expect_rows(const Tensor& out, const Tensor& src, const Tensor& index, const char* what) {
  TIDAL_ASSERT(out.ndim() == 2 && src.ndim() == 2 && out.dim(1) == src.dim(1) && out.dtype() == src.dtype() &&
                   index.dtype() == DType::i32,
               "{}: out {}, rows {}, index {} (rows of one width and dtype, an i32 index)", what, out.str(), src.str(),
               index.str());
}

}  // namespace

void gather_rows(Tensor& out, const Tensor& x, const Tensor& rows, const Tensor& scale) {
  expect_cpu_contiguous({&out, &x, &rows}, "gather_rows operand");
  expect_rows(out, x, rows, "gather_rows");
  TIDAL_ASSERT(rows.numel() == out.dim(0) && (!scale.defined() || scale.numel() == out.dim(0)),
               "gather_rows: {} rows out, index {}, scale {}", out.dim(0), rows.str(),
               scale.defined() ? scale.str() : "none");
  const std::int64_t P = out.dim(0), C = out.dim(1), N = x.dim(0);
  const std::int32_t* idx = rows.data<std::int32_t>();
  const float* s = scale.defined() ? scale.data<float>() : nullptr;
  with_float_type(x.dtype(), [&]<class T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t p = 0; p < P; ++p) {
      TIDAL_ASSERT(idx[p] >= -1 && idx[p] < N, "gather_rows: row {} of {}", idx[p], N);
      T* o = po + p * C;
      if (idx[p] < 0) {
        std::fill(o, o + C, from_float<T>(0.0f));
        continue;
      }
      const T* in = px + std::int64_t(idx[p]) * C;
      if (s == nullptr) {
        std::copy(in, in + C, o);
        continue;
      }
      const float f = s[p];
      for (std::int64_t c = 0; c < C; ++c) o[c] = from_float<T>(to_float(in[c]) * f);
    }
  });
}

void combine_rows(Tensor& out, const Tensor& src, const Tensor& slots, const Tensor& weights) {
  expect_cpu_contiguous({&out, &src, &slots}, "combine_rows operand");
  expect_rows(out, src, slots, "combine_rows");
  TIDAL_ASSERT(slots.ndim() == 2 && slots.dim(0) == out.dim(0) && (!weights.defined() || weights.shape() == slots.shape()),
               "combine_rows: out {}, slots {}, weights {}", out.str(), slots.str(),
               weights.defined() ? weights.str() : "none");
  const std::int64_t N = out.dim(0), C = out.dim(1), k = slots.dim(1), P = src.dim(0);
  const std::int32_t* sl = slots.data<std::int32_t>();
  const float* w = weights.defined() ? weights.data<float>() : nullptr;
  with_float_type(src.dtype(), [&]<class T>() {
    const T* ps = src.data<T>();
    T* po = out.data<T>();
#pragma omp parallel
    {
      std::vector<float> acc(static_cast<std::size_t>(C));
#pragma omp for schedule(static)
      for (std::int64_t n = 0; n < N; ++n) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int32_t p = sl[n * k + j];
          if (p < 0) continue;
          TIDAL_ASSERT(p < P, "combine_rows: slot {} of {}", p, P);
          const T* in = ps + std::int64_t(p) * C;
          const float f = w ? w[n * k + j] : 1.0f;
          for (std::int64_t c = 0; c < C; ++c) acc[std::size_t(c)] += f * to_float(in[c]);
        }
        T* o = po + n * C;
        for (std::int64_t c = 0; c < C; ++c) o[c] = from_float<T>(acc[std::size_t(c)]);
      }
    }
  });
}

void slot_dots(Tensor& out, const Tensor& a, const Tensor& src, const Tensor& slots) {
  expect_cpu_contiguous({&out, &a, &src, &slots}, "slot_dots operand");
  expect_rows(a, src, slots, "slot_dots");
  TIDAL_ASSERT(out.dtype() == DType::f32 && out.shape() == slots.shape() && slots.dim(0) == a.dim(0),
               "slot_dots: out {} (fp32, the slots' shape), slots {}, a {}", out.str(), slots.str(), a.str());
  const std::int64_t N = a.dim(0), C = a.dim(1), k = slots.dim(1), P = src.dim(0);
  const std::int32_t* sl = slots.data<std::int32_t>();
  float* po = out.data<float>();
  with_float_type(a.dtype(), [&]<class T>() {
    const T* pa = a.data<T>();
    const T* ps = src.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int32_t p = sl[n * k + j];
        float dot = 0.0f;
        if (p >= 0) {
          TIDAL_ASSERT(p < P, "slot_dots: slot {} of {}", p, P);
          const T* x = pa + n * C;
          const T* y = ps + std::int64_t(p) * C;
#pragma omp simd reduction(+ : dot)
          for (std::int64_t c = 0; c < C; ++c) dot += to_float(x[c]) * to_float(y[c]);
        }
        po[n * k + j] = dot;
      }
  });
}

}  // namespace tidal::ops::cpu
