#include "models/decoder.h"

#include "core/error.h"
#include "ops/attention.h"

#include <algorithm>
#include <cmath>

namespace tidal::models {

void Decoder::feed(std::int32_t token) {
  TIDAL_CHECK(positions_ < max_positions(), "the sequence fills all {} positions of the model: nothing more can be fed",
              max_positions());
  TIDAL_CHECK(token >= 0 && token < vocab_size(), "token id {} is outside the model's vocabulary [0, {})", token,
              vocab_size());
  step(token, positions_);
  ++positions_;
}

Tensor host_weight(Model& model, const std::string& name, const Shape& shape) {
  const nn::Parameter& p = model.parameter(name);
  std::string held = p.data.defined() ? p.data.str() : "not held as a tensor";
  if (p.full_shape.size() > 0) held += fmt::format(", a block of {}", p.full_shape.str());
  TIDAL_CHECK(p.data.defined() && p.data.dtype() == DType::f32 && p.full_shape.size() == 0,
              "sampling needs the whole fp32 weights in this process, and '{}' is {}: sample from a checkpoint "
              "(tidal sample) instead",
              name, held);
  TIDAL_ASSERT(p.data.shape() == shape, "{}: {}, expected {}", name, p.data.str(), shape.str());
  return on_host(p.data);
}

void attend_cached(const float* q, const float* k, const float* v, std::int64_t t, int n_head, int n_kv_head,
                   std::int64_t hd, float* scores, float* y) {
  const float scale = 1.0f / std::sqrt(float(hd));
  const std::int64_t row = n_kv_head * hd;  // a cached position's keys (or values)
  for (int h = 0; h < n_head; ++h) {
    const std::int64_t off = h * hd, kv_off = (h % n_kv_head) * hd;
    float top = -INFINITY;
    for (std::int64_t j = 0; j <= t; ++j) {
      float s = 0;
      for (std::int64_t d = 0; d < hd; ++d) s += q[off + d] * k[j * row + kv_off + d];
      scores[j] = s * scale;
      top = std::max(top, scores[j]);
    }
    float sum = 0;
    for (std::int64_t j = 0; j <= t; ++j) sum += scores[j] = std::exp(scores[j] - top);
    float* out = y + ops::output_head(h, n_head, n_kv_head) * hd;
    std::fill(out, out + hd, 0.0f);
    for (std::int64_t j = 0; j <= t; ++j) {
      const float p = scores[j] / sum;
      for (std::int64_t d = 0; d < hd; ++d) out[d] += p * v[j * row + kv_off + d];
    }
  }
}

}  // namespace tidal::models
