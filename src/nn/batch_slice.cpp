#include "nn/batch_slice.h"

#include "core/error.h"

namespace tidal::nn {

Tensor BatchSlice::of(const Tensor& batch_tensor) const {
  Tensor part = batch_tensor;
  if (parts > 1) {
    const std::int64_t B = part.dim(0);
    TIDAL_CHECK(B % parts == 0, "a micro-batch of {} samples does not split into {} equal parts across the tensor "
                "grid: make train.micro_batch_size (or the per-replica batch) a multiple of {}", B, parts, parts);
    part = part.slice(0, index * (B / parts), (index + 1) * (B / parts));
  }
  if (position_parts > 1) {
    TIDAL_ASSERT(part.ndim() >= 2, "a batch tensor {} has no positions to split", part.str());
    const std::int64_t T = part.dim(1);
    TIDAL_CHECK(T % position_parts == 0, "a sequence of {} positions does not split into {} equal parts across the "
                "sequence ring: make model.seq_len a multiple of parallel.sequence", T, position_parts);
    part = part.slice(1, first_position(T), first_position(T) + T / position_parts).clone();
  }
  return part;
}

}  // namespace tidal::nn
