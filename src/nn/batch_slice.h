// Which part of the replica's micro-batch a rank holds: a run of its samples (2D, 2.5D and 3D
// tensor parallelism split samples over the grid) and a run of every sample's positions
// (sequence parallelism splits the sequence over the ring). Layers that read the batch directly
// (embeddings of token ids, the attention's key mask, the loss's targets) take the whole
// micro-batch and pick their part with of().
#pragma once

#include "core/tensor.h"

namespace tidal::nn {

struct BatchSlice {
  int parts = 1, index = 0;                    // samples: the index-th of `parts` equal runs
  int position_parts = 1, position_index = 0;  // positions: likewise, along dim 1

  // Rows [index B / parts, (index + 1) B / parts) of a [B, ...] batch tensor and, when positions
  // are split, columns [position_index T / position_parts, ...) of a [B, T, ...] one: a view when
  // only samples are split, else a contiguous copy.
  Tensor of(const Tensor& batch_tensor) const;
  // The first global position of this part (0 unless positions are split), for T positions.
  std::int64_t first_position(std::int64_t T) const { return position_index * (T / position_parts); }
};

}  // namespace tidal::nn
