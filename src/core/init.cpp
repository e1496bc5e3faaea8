#include "core/init.h"

#include "core/philox.h"

#include <cmath>

namespace tidal {
namespace {

PhiloxKey key_of(InitKey k) { return {std::uint32_t(k.param_id), std::uint32_t(k.param_id >> 32) ^ std::uint32_t(k.seed)}; }

// Visit every element of the block: f(global flat index, local flat index).
template <class F>
void for_each_in_block(const Tensor& out, const Shape& full, const Shape& offset, F&& f) {
  const int nd = full.size();
  TIDAL_ASSERT(out.ndim() == nd && out.is_contiguous() && out.dtype() == DType::f32 && out.device().is_cpu(),
               "init block {} of a {} tensor", out.str(), full.str());
  Shape off = offset.size() == 0 ? Shape(std::vector<std::int64_t>(std::size_t(nd), 0)) : offset;
  TIDAL_ASSERT(off.size() == nd, "offset {} for shape {}", off.str(), full.str());
  for (int d = 0; d < nd; ++d)
    TIDAL_ASSERT(off[d] >= 0 && off[d] + out.dim(d) <= full[d], "block {} at {} outside {}", out.shape().str(),
                 off.str(), full.str());
  const Shape full_strides = contiguous_strides(full);
  const std::int64_t n = out.numel();
  const std::int64_t inner = nd ? out.dim(nd - 1) : 1;
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < (inner ? n / inner : 0); ++row) {
    // Global index of the row's first element.
    std::int64_t rem = row, g = 0;
    for (int d = nd - 2; d >= 0; --d) {
      const std::int64_t i = rem % out.dim(d);
      rem /= out.dim(d);
      g += (i + off[d]) * full_strides[d];
    }
    if (nd) g += off[nd - 1];
    for (std::int64_t j = 0; j < inner; ++j) f(std::uint64_t(g + j), row * inner + j);
  }
}

}  // namespace

void init_normal(Tensor& out, InitKey key, float mean, float std, const Shape& full, const Shape& offset) {
  if (out.device().is_meta()) return;  // no values to draw
  const PhiloxKey k = key_of(key);
  const std::uint32_t hi = std::uint32_t(key.seed >> 32);
  float* p = out.data<float>();
  for_each_in_block(out, full, offset, [&](std::uint64_t g, std::int64_t l) {
    const PhiloxCounter r = philox4x32({std::uint32_t(g), std::uint32_t(g >> 32), hi, 0x1417a1u}, k);
    // Box-Muller in double so the result is the same whatever the vector width.
    const double u1 = (double(r[0]) + 1.0) / 4294967296.0;  // (0, 1]
    const double u2 = double(r[1]) / 4294967296.0;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    p[l] = float(mean + std * z);
  });
}

void init_uniform(Tensor& out, InitKey key, float lo, float hi_value, const Shape& full, const Shape& offset) {
  if (out.device().is_meta()) return;
  const PhiloxKey k = key_of(key);
  const std::uint32_t hi = std::uint32_t(key.seed >> 32);
  float* p = out.data<float>();
  for_each_in_block(out, full, offset, [&](std::uint64_t g, std::int64_t l) {
    const PhiloxCounter r = philox4x32({std::uint32_t(g), std::uint32_t(g >> 32), hi, 0x0a1f0du}, k);
    p[l] = lo + (hi_value - lo) * uniform01(r[0]);
  });
}

}  // namespace tidal
