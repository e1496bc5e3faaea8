// Dropout with a Philox mask keyed by (seed, layer) and counted by (element, step, micro-batch):
// the mask is a pure function of those, so backward and activation-checkpoint recomputation
// regenerate it instead of storing it.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

#include <cstdint>

namespace tidal::ops {

struct DropoutKey {
  std::uint64_t seed = 0;
  std::uint64_t layer = 0;  // stable id of the dropout site
  std::uint32_t step = 0;
  std::uint32_t micro_batch = 0;
  std::int64_t first_element = 0;  // global index of this tensor's element 0 (for shards)
};

namespace cpu {
void dropout_forward(Tensor& y, const Tensor& x, float p, const DropoutKey& key);
void dropout_backward(Tensor& dx, const Tensor& dy, float p, const DropoutKey& key);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void dropout_forward(Tensor& y, const Tensor& x, float p, const DropoutKey& key);
void dropout_backward(Tensor& dx, const Tensor& dy, float p, const DropoutKey& key);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void dropout_forward(Tensor& y, const Tensor& x, float p, const DropoutKey& key);
void dropout_backward(Tensor& dx, const Tensor& dy, float p, const DropoutKey& key);
}  // namespace cuda
#endif

// y = x * mask / (1 - p), mask_i = uniform_i >= p. May run in place (y aliases x).
inline void dropout_forward(Tensor& y, const Tensor& x, float p, const DropoutKey& key) {
  TIDAL_OPS_DISPATCH(x, dropout_forward, y, x, p, key);
}
inline void dropout_backward(Tensor& dx, const Tensor& dy, float p, const DropoutKey& key) {
  TIDAL_OPS_DISPATCH(dy, dropout_backward, dx, dy, p, key);
}

}  // namespace tidal::ops
