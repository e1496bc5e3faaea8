#include "ops/nf4.h"

#include "core/error.h"
#include "ops/cast.h"

#include <algorithm>
#include <cmath>

namespace tidal::ops {
namespace {

// bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), in the
// float32 arithmetic torch does it in: for exponent i = 0..6, the midpoints of
// torch.linspace(0.1, 1, 2^i + 1) times 10^(i - 6), both signs; then 0 and 1, sorted.
std::array<float, 256> make_dynamic_code() {
  std::vector<float> data;
  for (int i = 0; i < 7; ++i) {
    const std::int64_t steps = (std::int64_t(1) << i) + 1;
    // torch's CPU linspace: start + step i below halfway, end - step (steps - i - 1) above.
    const float start = 0.1f, end = 1.0f, step = (end - start) / float(steps - 1);
    std::vector<float> bounds(static_cast<std::size_t>(steps));
    for (std::int64_t k = 0; k < steps; ++k)
      bounds[std::size_t(k)] = k < steps / 2 ? start + step * float(k) : end - step * float(steps - k - 1);
    const float scale = float(std::pow(10.0, double(i - 6)));
    for (std::int64_t k = 0; k + 1 < steps; ++k) {
      const float mean = (bounds[std::size_t(k)] + bounds[std::size_t(k + 1)]) / 2.0f;
      data.push_back(scale * mean);
      data.push_back(-scale * mean);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  TIDAL_ASSERT(data.size() == 256, "a dynamic code of {} values", data.size());
  std::sort(data.begin(), data.end());
  std::array<float, 256> out{};
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

// The index of the nearest of N ascending values to x, given their `midpoints`: how many of them x
// is above (the lower of two equally near; NaN: 0).
template <std::size_t M>
std::uint8_t nearest(const std::array<float, M>& midpoints, float x) {
  return std::uint8_t(std::upper_bound(midpoints.begin(), midpoints.end(), x,
                                       [](float v, float m) { return !(v > m); }) - midpoints.begin());
}

template <std::size_t N>
std::array<float, N - 1> midpoints_of(const std::array<float, N>& v) {
  std::array<float, N - 1> m{};
  for (std::size_t i = 0; i + 1 < N; ++i) m[i] = float((double(v[i]) + double(v[i + 1])) / 2.0);
  return m;
}

}  // namespace

const std::array<float, 16>& nf4_values() {
  static const std::array<float, 16> v = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
      0.7229568362236023f, 1.0f};
  return v;
}

const std::array<float, 256>& dynamic_code() {
  static const std::array<float, 256> code = make_dynamic_code();
  return code;
}

Nf4Weight nf4_quantize(const Tensor& w) {
  TIDAL_ASSERT(w.device().is_cpu() && w.is_contiguous(), "nf4_quantize of {} on {}", w.str(), w.device().str());
  Tensor x = w;
  if (w.dtype() != DType::f32) {
    x = Tensor::empty(w.shape(), DType::f32, host_allocator());
    cast(x, w);
  }
  Nf4Weight q;
  q.shape = w.shape();
  const std::int64_t n = w.numel(), blocks = q.blocks(), groups = (blocks + kNf4StatsBlock - 1) / kNf4StatsBlock;
  q.codes = Tensor::zeros({(n + 1) / 2}, DType::u8, host_allocator());
  q.absmax_codes = Tensor::empty({blocks}, DType::u8, host_allocator());
  q.absmax_scales = Tensor::empty({groups}, DType::f32, host_allocator());
  const float* v = x.data<float>();
  std::uint8_t* codes = q.codes.data<std::uint8_t>();
  static const std::array<float, 15> nf4_mid = midpoints_of(nf4_values());
  std::vector<float> absmax(std::size_t(blocks), 0.0f);
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t end = std::min(n, (b + 1) * kNf4Block);
    float m = 0.0f;
    for (std::int64_t i = b * kNf4Block; i < end; ++i) m = std::max(m, std::fabs(v[i]));
    absmax[std::size_t(b)] = m;
    const float inverse = 1.0f / m;  // bitsandbytes scales by the reciprocal
    for (std::int64_t i = b * kNf4Block; i < end; ++i) {
      const std::uint8_t c = nearest(nf4_mid, v[i] * inverse);
      codes[i / 2] |= std::uint8_t(i % 2 == 0 ? c << 4 : c);
    }
  }
  // Double quantization: the absmax values less their mean, 8 bits each over blocks of 256.
  double sum = 0;
  for (float m : absmax) sum += m;
  q.absmax_offset = float(sum / double(blocks));
  static const std::array<float, 255> dyn_mid = midpoints_of(dynamic_code());
  std::uint8_t* acodes = q.absmax_codes.data<std::uint8_t>();
  float* scales = q.absmax_scales.data<float>();
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t end = std::min(blocks, (g + 1) * kNf4StatsBlock);
    float m = 0.0f;
    for (std::int64_t b = g * kNf4StatsBlock; b < end; ++b)
      m = std::max(m, std::fabs(absmax[std::size_t(b)] - q.absmax_offset));
    scales[g] = m;
    const float inverse = 1.0f / m;
    for (std::int64_t b = g * kNf4StatsBlock; b < end; ++b)
      acodes[b] = nearest(dyn_mid, (absmax[std::size_t(b)] - q.absmax_offset) * inverse);
  }
  return q;
}

Tensor nf4_absmax(const Nf4Weight& w) {
  const Tensor codes = on_host(w.absmax_codes), scales = on_host(w.absmax_scales);
  Tensor out = Tensor::empty({w.blocks()}, DType::f32, host_allocator());
  for (std::int64_t b = 0; b < w.blocks(); ++b)
    out.data<float>()[b] = dynamic_code()[codes.data<std::uint8_t>()[b]] * scales.data<float>()[b / kNf4StatsBlock] +
                           w.absmax_offset;
  return out;
}

std::int64_t nf4_row_length(const Tensor& out, const Nf4Weight& w, Nf4Tile at) {
  const std::int64_t row = w.shape.size() && w.shape[0] ? w.shape.numel() / w.shape[0] : 0;
  const bool whole = out.shape() == w.shape && at.first_row == 0 && at.first_col == 0;
  TIDAL_ASSERT(whole || (out.ndim() == 2 && at.first_row >= 0 && at.first_col >= 0 &&
                         at.first_row + out.dim(0) <= w.shape[0] && at.first_col + out.dim(1) <= row),
               "nf4_dequantize of {} at row {}, column {} into {}", w.shape.str(), at.first_row, at.first_col,
               out.str());
  return row;
}

Nf4Weight nf4_shaped(const Shape& shape, Allocator& alloc) {
  Nf4Weight q;
  q.shape = shape;
  const std::int64_t blocks = q.blocks();
  q.codes = Tensor::empty({(shape.numel() + 1) / 2}, DType::u8, alloc);
  q.absmax_codes = Tensor::empty({blocks}, DType::u8, alloc);
  q.absmax_scales = Tensor::empty({(blocks + kNf4StatsBlock - 1) / kNf4StatsBlock}, DType::f32, alloc);
  return q;
}

Nf4Weight Nf4Weight::to(Allocator& alloc) const {
  return {.shape = shape,
          .codes = codes.clone(alloc),
          .absmax_codes = absmax_codes.clone(alloc),
          .absmax_scales = absmax_scales.clone(alloc),
          .absmax_offset = absmax_offset};
}

}  // namespace tidal::ops
