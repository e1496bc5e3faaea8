// Which part of the replica's micro-batch a rank holds: a run of its samples (2D, 2.5D and 3D
// tensor parallelism split samples over the grid) and every sample's positions of its place on
// the sequence ring: chunk index of position_parts, or, zig-zag, chunks index and
// 2 position_parts - 1 - index of 2 position_parts (so under the causal mask every ring position
// attends the same number of keys), held in that order. Layers that read the batch directly
// (embeddings of token ids, the attention's key mask, the loss's targets) take the whole
// micro-batch and pick their part with of().
#pragma once

#include "core/tensor.h"

#include <vector>

namespace tidal::nn {

// Positions [global, global + length) of the whole sequence, held at [local, local + length) of a
// rank's part.
struct PositionRun {
  std::int64_t local, global, length;
};

struct BatchSlice {
  int parts = 1, index = 0;                    // samples: the index-th of `parts` equal runs
  int position_parts = 1, position_index = 0;  // positions: the place on the sequence ring
  bool zigzag = false;                         // two chunks per place (above)

  // Rows [index B / parts, (index + 1) B / parts) of a [B, ...] batch tensor and, when positions
  // are split, this part's positions of a [B, T, ...] one: a view when only samples are split,
  // else a contiguous copy.
  Tensor of(const Tensor& batch_tensor) const;
  // The runs of positions of a part that holds `local` of them (one run, or two zig-zag).
  std::vector<PositionRun> position_runs(std::int64_t local) const;
  // Copies this part's positions of `whole` [B, T, ...] into `part` [B, T / position_parts, ...]
  // (take), or the part's rows back to their positions in `whole` (put).
  void take_positions(const Tensor& whole, Tensor& part) const;
  void put_positions(Tensor& whole, const Tensor& part) const;
  // The same for the part at another place of the ring.
  BatchSlice at_place(int place) const {
    BatchSlice other = *this;
    other.position_index = place;
    return other;
  }
};

}  // namespace tidal::nn
