#include "ops/dropout.h"

#include "core/philox.h"
#include "ops/cpu/typed.h"

namespace tidal::ops::cpu {
namespace {

// Calls f(i, keep) for every element; one Philox block serves four consecutive global indices.
template <class F>
void for_each_mask(std::int64_t n, float p, const DropoutKey& key, F&& f) {
  const PhiloxKey k{std::uint32_t(key.layer) ^ std::uint32_t(key.seed), std::uint32_t(key.layer >> 32) ^ std::uint32_t(key.seed >> 32)};
  const std::int64_t first = key.first_element;
  const std::int64_t g_begin = first / 4, g_end = (first + n + 3) / 4;
#pragma omp parallel for schedule(static)
  for (std::int64_t g = g_begin; g < g_end; ++g) {
    const PhiloxCounter r = philox4x32({std::uint32_t(g), std::uint32_t(std::uint64_t(g) >> 32), key.step, key.micro_batch}, k);
    for (int lane = 0; lane < 4; ++lane) {
      const std::int64_t i = g * 4 + lane - first;
      if (i >= 0 && i < n) f(i, uniform01(r[std::size_t(lane)]) >= p);
    }
  }
}

void apply(Tensor& out, const Tensor& in, float p, const DropoutKey& key, const char* what) {
  expect_cpu_contiguous(out, what);
  expect_cpu_contiguous(in, what);
  expect_same(out, in, what);
  TIDAL_CHECK(p >= 0.0f && p < 1.0f, "dropout probability must be in [0, 1), got {}", p);
  const float keep_scale = 1.0f / (1.0f - p);
  with_float_type(in.dtype(), [&]<class T>() {
    const T* pi = in.data<T>();
    T* po = out.data<T>();
    for_each_mask(in.numel(), p, key, [&](std::int64_t i, bool keep) {
      po[i] = from_float<T>(keep ? to_float(pi[i]) * keep_scale : 0.0f);
    });
  });
}

}  // namespace

void dropout_forward(Tensor& y, const Tensor& x, float p, const DropoutKey& key) { apply(y, x, p, key, "dropout"); }

void dropout_backward(Tensor& dx, const Tensor& dy, float p, const DropoutKey& key) {
  apply(dx, dy, p, key, "dropout backward");
}

}  // namespace tidal::ops::cpu
