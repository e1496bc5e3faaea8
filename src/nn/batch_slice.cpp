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
    const std::int64_t T = part.dim(1), chunks = zigzag ? 2 * position_parts : position_parts;
    TIDAL_CHECK(T % chunks == 0, "a sequence of {} positions does not split into {} equal chunks across the sequence "
                "ring: make model.seq_len a multiple of {}", T, chunks, chunks);
    std::vector<std::int64_t> shape = part.shape().vec();
    shape[1] = T / position_parts;
    Tensor mine = Tensor::empty(Shape(shape), part.dtype());
    take_positions(part, mine);
    part = mine;
  }
  return part;
}

void BatchSlice::take_positions(const Tensor& whole, Tensor& part) const {
  for (const PositionRun& r : position_runs(part.dim(1)))
    part.slice(1, r.local, r.local + r.length).copy_from(whole.slice(1, r.global, r.global + r.length));
}

void BatchSlice::put_positions(Tensor& whole, const Tensor& part) const {
  for (const PositionRun& r : position_runs(part.dim(1)))
    whole.slice(1, r.global, r.global + r.length).copy_from(part.slice(1, r.local, r.local + r.length));
}

std::vector<PositionRun> BatchSlice::position_runs(std::int64_t local) const {
  if (!zigzag || position_parts == 1) return {{0, position_index * local, local}};
  const std::int64_t chunk = local / 2;
  TIDAL_ASSERT(local % 2 == 0, "zig-zag ring position with {} positions", local);
  return {{0, position_index * chunk, chunk}, {chunk, (2 * position_parts - 1 - position_index) * chunk, chunk}};
}

}  // namespace tidal::nn
