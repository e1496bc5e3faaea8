#include "nn/parameter.h"

#include "core/error.h"
#include "core/init.h"
#include "core/philox.h"

namespace tidal::nn {

void materialize(Parameter& p, std::uint64_t seed, Allocator& alloc) {
  TIDAL_ASSERT(!p.data.defined(), "parameter {} materialized twice", p.name);
  TIDAL_ASSERT(!p.name.empty(), "parameter '{}' has no full name: assign names first", p.local_name);
  p.data = Tensor::empty(p.shape, DType::f32, alloc);
  p.grad = Tensor::zeros(p.shape, DType::f32, alloc);
  switch (p.init.kind) {
    case ParameterInit::Kind::normal: {
      const InitKey key{seed, fnv1a64(p.name.data(), p.name.size())};
      if (p.segments == 1) {
        init_normal(p.data, key, 0.0f, p.init.std, p.full_shape.size() ? p.full_shape : p.shape, p.offset);
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
    case ParameterInit::Kind::zeros: p.data.zero_(); break;
    case ParameterInit::Kind::ones: p.data.fill_(1.0f); break;
  }
}

}  // namespace tidal::nn
