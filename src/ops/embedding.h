// Embedding lookup (token, token-type) and learned position embeddings.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

#include <cstdint>
#include <limits>

namespace tidal::ops {

// An id whose row lives in another rank's shard of the table (vocab-parallel embedding): its
// output row is zero (left as is when accumulating) and it adds nothing to the table gradient.
inline constexpr std::int32_t kIdElsewhere = std::numeric_limits<std::int32_t>::min();

namespace cpu {
void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& table, bool accumulate);
void embedding_backward(Tensor& dtable, const Tensor& dy, const Tensor& ids);
void position_embedding_forward(Tensor& y, const Tensor& table, std::int64_t first_position);
void position_embedding_backward(Tensor& dtable, const Tensor& dy, std::int64_t first_position);
void embedding_shard_ids(Tensor& local, const Tensor& ids, std::int64_t first, std::int64_t count, std::int64_t vocab);
}  // namespace cpu
namespace meta {  // ops/meta/: what the op costs, on meta tensors
void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& table, bool accumulate);
void embedding_backward(Tensor& dtable, const Tensor& dy, const Tensor& ids);
void position_embedding_forward(Tensor& y, const Tensor& table, std::int64_t first_position);
void position_embedding_backward(Tensor& dtable, const Tensor& dy, std::int64_t first_position);
void embedding_shard_ids(Tensor& local, const Tensor& ids, std::int64_t first, std::int64_t count, std::int64_t vocab);
}  // namespace meta
#if TIDAL_CUDA
namespace cuda {
void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& table, bool accumulate);
void embedding_backward(Tensor& dtable, const Tensor& dy, const Tensor& ids);
void position_embedding_forward(Tensor& y, const Tensor& table, std::int64_t first_position);
void position_embedding_backward(Tensor& dtable, const Tensor& dy, std::int64_t first_position);
void embedding_shard_ids(Tensor& local, const Tensor& ids, std::int64_t first, std::int64_t count, std::int64_t vocab);
}  // namespace cuda
#endif

// y [B, T, C] = (or +=) table [V, C] rows at ids [B, T] (i32). An id outside [0, V) is an error.
inline void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& table, bool accumulate = false) {
  TIDAL_OPS_DISPATCH(table, embedding_forward, y, ids, table, accumulate);
}
// dtable [V, C] += scatter of dy [B, T, C] by ids.
inline void embedding_backward(Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  TIDAL_OPS_DISPATCH(dtable, embedding_backward, dtable, dy, ids);
}
// y [B, T, C] += table[first_position + t] (first_position > 0 for a sequence shard).
inline void position_embedding_forward(Tensor& y, const Tensor& table, std::int64_t first_position = 0) {
  TIDAL_OPS_DISPATCH(table, position_embedding_forward, y, table, first_position);
}
// dtable [Tmax, C] rows first_position + t += sum over the batch of dy [B, T, C].
inline void position_embedding_backward(Tensor& dtable, const Tensor& dy, std::int64_t first_position = 0) {
  TIDAL_OPS_DISPATCH(dtable, position_embedding_backward, dtable, dy, first_position);
}

// local (i32) = ids rebased to the rows [first, first + count) of a shard of a [vocab, ...] table
// (the vocabulary-parallel embedding), kIdElsewhere for the other shards' rows. An id outside
// [0, vocab) is the user's error, named with its position and the key to check.
inline void embedding_shard_ids(Tensor& local, const Tensor& ids, std::int64_t first, std::int64_t count,
                                std::int64_t vocab) {
  TIDAL_OPS_DISPATCH(ids, embedding_shard_ids, local, ids, first, count, vocab);
}

}  // namespace tidal::ops
