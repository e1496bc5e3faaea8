#include "ops/cross_entropy.h"

#include "ops/cpu/typed.h"
#include "ops/cpu/vec_math.h"

#include <cmath>
#include <limits>

namespace tidal::ops::cpu {
namespace {

void check(const Tensor& logits, const Tensor& targets) {
  expect_cpu_contiguous(logits, "cross_entropy logits");
  expect_cpu_contiguous(targets, "cross_entropy targets");
  TIDAL_ASSERT(targets.dtype() == DType::i32 && targets.numel() == rows_of(logits), "cross_entropy targets {} for {}",
               targets.str(), logits.str());
  const std::int64_t V = logits.dim(-1);
  const std::int32_t* t = targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < targets.numel(); ++i)
    TIDAL_CHECK(t[i] == kIgnoreIndex || t[i] == kTargetElsewhere || (t[i] >= 0 && t[i] < V),
                "target {} at position {} is outside the {} classes (and is not the ignore index {})", t[i], i, V,
                kIgnoreIndex);
}

}  // namespace

void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets) {
  check(logits, targets);
  const std::int64_t V = logits.dim(-1), N = rows_of(logits);
  TIDAL_ASSERT(losses.numel() == N && lse.numel() == N && losses.dtype() == DType::f32 && lse.dtype() == DType::f32,
               "cross_entropy losses {} lse {}", losses.str(), lse.str());
  const std::int32_t* pt = targets.data<std::int32_t>();
  float* pl = losses.data<float>();
  float* plse = lse.data<float>();
  with_float_type(logits.dtype(), [&]<class T>() {
    const T* px = logits.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const T* row = px + n * V;
      float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
      for (std::int64_t j = 0; j < V; ++j) mx = std::max(mx, to_float(row[j]));
      float sum = 0.0f;
      #pragma omp simd reduction(+ : sum)
      for (std::int64_t j = 0; j < V; ++j) sum += exp_fast(to_float(row[j]) - mx);
      const float l = mx + std::log(sum);
      plse[n] = l;
      pl[n] = pt[n] < 0 ? 0.0f : l - to_float(row[pt[n]]);
    }
  });
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float scale) {
  check(logits, targets);
  expect_cpu_contiguous(dlogits, "cross_entropy dlogits");
  expect_same(dlogits, logits, "cross_entropy dlogits/logits");
  const std::int64_t V = logits.dim(-1), N = rows_of(logits);
  const std::int32_t* pt = targets.data<std::int32_t>();
  const float* plse = lse.data<float>();
  with_float_type(logits.dtype(), [&]<class T>() {
    const T* px = logits.data<T>();
    T* pd = dlogits.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      const T* row = px + n * V;
      T* out = pd + n * V;
      if (pt[n] == kIgnoreIndex) {
        for (std::int64_t j = 0; j < V; ++j) out[j] = from_float<T>(0.0f);
        continue;
      }
      const float l = plse[n];
#pragma omp simd
      for (std::int64_t j = 0; j < V; ++j) {
        const float p = exp_fast(to_float(row[j]) - l);
        out[j] = from_float<T>(scale * (p - (j == pt[n] ? 1.0f : 0.0f)));
      }
    }
  });
}

void cross_entropy_shard_targets(Tensor& local, const Tensor& targets, std::int64_t first, std::int64_t count,
                                 std::int64_t classes) {
  expect_cpu_contiguous({&local, &targets}, "cross_entropy_shard_targets operand");
  const std::int64_t N = targets.numel();
  const std::int32_t* g = targets.data<std::int32_t>();
  std::int32_t* l = local.data<std::int32_t>();
  for (std::int64_t i = 0; i < N; ++i) {
    const std::int64_t t = g[i];
    TIDAL_CHECK(t == kIgnoreIndex || (t >= 0 && t < classes), "target {} at position {} is outside the {} classes "
                "[0, {}): check model.vocab_size (or model.num_classes) against the data", t, i, classes, classes);
    l[i] = t == kIgnoreIndex                  ? kIgnoreIndex
           : t >= first && t < first + count ? std::int32_t(t - first)
                                             : kTargetElsewhere;
  }
}

void cross_entropy_shard_terms(Tensor& terms, const Tensor& lse, const Tensor& max_lse, const Tensor& losses,
                               const Tensor& local) {
  expect_cpu_contiguous({&terms, &lse, &max_lse, &losses, &local}, "cross_entropy_shard_terms operand");
  const std::int64_t N = lse.numel();
  const float *pl = lse.data<float>(), *pm = max_lse.data<float>(), *ploss = losses.data<float>();
  const std::int32_t* pt = local.data<std::int32_t>();
  float* out = terms.data<float>();
  for (std::int64_t i = 0; i < N; ++i) {
    out[2 * i] = std::exp(pl[i] - pm[i]);
    out[2 * i + 1] = pt[i] >= 0 ? pl[i] - ploss[i] : 0.0f;
  }
}

void cross_entropy_shard_combine(Tensor& lse, Tensor& losses, const Tensor& max_lse, const Tensor& terms,
                                 const Tensor& local) {
  expect_cpu_contiguous({&lse, &losses, &max_lse, &terms, &local}, "cross_entropy_shard_combine operand");
  const std::int64_t N = lse.numel();
  const float *pm = max_lse.data<float>(), *in = terms.data<float>();
  const std::int32_t* pt = local.data<std::int32_t>();
  float *pl = lse.data<float>(), *ploss = losses.data<float>();
  for (std::int64_t i = 0; i < N; ++i) {
    pl[i] = pm[i] + std::log(in[2 * i]);
    ploss[i] = pt[i] == kIgnoreIndex ? 0.0f : pl[i] - in[2 * i + 1];
  }
}

}  // namespace tidal::ops::cpu
