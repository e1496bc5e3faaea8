#include "nn/parameter.h"

#include "core/error.h"
#include "core/init.h"
#include "core/philox.h"
#include "ops/cast.h"

#include <algorithm>

namespace tidal::nn {

std::int64_t rows_inside(const Parameter& p) {
  if (p.full_shape.size() == 0) return p.shape[0];
  const std::int64_t first = p.offset.size() ? p.offset[0] : 0;
  const std::int64_t inside = std::clamp<std::int64_t>(p.full_shape[0] - first, 0, p.shape[0]);
  TIDAL_ASSERT(inside == p.shape[0] || p.segments == 1, "{}: a padded block of a parameter in {} segments", p.name,
               p.segments);
  return inside;
}

void materialize(Parameter& p, std::uint64_t seed, Allocator& alloc, DType frozen_dtype) {
  if (p.frozen && frozen_dtype != DType::f32) {  // initialised in fp32 beside, then rounded
    materialize(p, seed, alloc);
    Tensor low = Tensor::empty(p.shape, frozen_dtype, alloc);
    ops::cast(low, p.data);
    p.data = low;
    return;
  }
  TIDAL_ASSERT(!p.data.defined(), "parameter {} materialized twice", p.name);
  TIDAL_ASSERT(!p.name.empty(), "parameter '{}' has no full name: assign names first", p.local_name);
  p.data = Tensor::empty(p.shape, DType::f32, alloc);
  if (!p.frozen) p.grad = Tensor::zeros(p.shape, DType::f32, alloc);
  switch (p.init.kind) {
    case ParameterInit::Kind::normal: {
      const InitKey key{seed, fnv1a64(p.name.data(), p.name.size())};
      if (p.segments == 1) {  // padding rows stay zero
        const std::int64_t inside = rows_inside(p);
        if (inside < p.shape[0]) p.data.zero_();
        Tensor block = p.data.slice(0, 0, inside);
        if (inside > 0) init_normal(block, key, 0.0f, p.init.std, p.full_shape.size() ? p.full_shape : p.shape, p.offset);
        break;
      }
      // Each segment's block: local rows [m s, (m+1) s) from full rows m S + offset[0] + ...
      const std::int64_t s = p.shape[0] / p.segments, S = p.full_shape[0] / p.segments;
      for (int m = 0; m < p.segments; ++m) {
        Tensor block = p.data.slice(0, m * s, (m + 1) * s);
        Shape offset = p.offset;
        offset[0] += m * S;
        init_normal(block, key, 0.0f, p.init.std, p.full_shape, offset);
      }
      break;
    }
    case ParameterInit::Kind::uniform: {  // a block of the full parameter, as normal's
      TIDAL_ASSERT(p.segments == 1, "{}: a uniform init in segments", p.name);
      init_uniform(p.data, {seed, fnv1a64(p.name.data(), p.name.size())}, -p.init.std, p.init.std,
                   p.full_shape.size() ? p.full_shape : p.shape, p.offset);
      break;
    }
    case ParameterInit::Kind::zeros: p.data.zero_(); break;
    case ParameterInit::Kind::ones: p.data.fill_(1.0f); break;
  }
}

}  // namespace tidal::nn
