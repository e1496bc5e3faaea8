#include "nn/embedding.h"

#include "core/gpu.h"
#include "ops/embedding.h"

namespace tidal::nn {

Embedding::Embedding(std::int64_t num, std::int64_t dim, ParameterInit init, BatchSlice part)
    : table_(&add_parameter("weight", {num, dim}, init)), part_(part) {}

Tensor Embedding::forward(const Tensor& batch_ids, Context& ctx) {
  const Tensor ids = part_.of(batch_ids);
  Shape s = ids.shape();
  s.push_back(table_->shape[1]);
  Tensor y = ctx.empty(s, table_->data.dtype());
  ops::embedding_forward(y, ids, table_->data);
  ctx.saved = {ids};
  return y;
}

Tensor Embedding::backward(const Tensor& dy, Context& ctx) {
  if (!table_->frozen) ops::embedding_backward(table_->grad, dy, ctx.saved.at(0));
  ctx.saved.clear();
  return {};
}

PositionEmbedding::PositionEmbedding(std::int64_t max_positions, std::int64_t dim, ParameterInit init,
                                     BatchSlice positions)
    : table_(&add_parameter("weight", {max_positions, dim}, init)), positions_(positions) {}

template <class Fn>
void PositionEmbedding::for_each_run(const Tensor& x, Fn&& fn) const {
  const std::vector<PositionRun> runs = positions_.position_runs(x.dim(1));
  if (runs.size() == 1) return fn(x, runs[0].global);
  for (std::int64_t b = 0; b < x.dim(0); ++b)
    for (const PositionRun& r : runs) fn(x.slice(0, b, b + 1).slice(1, r.local, r.local + r.length), r.global);
}

Tensor PositionEmbedding::token_positions(const Context& ctx) const {
  const Batch* batch = ctx.state().batch;
  if (batch == nullptr || !batch->positions.defined()) return {};
  Tensor positions = positions_.of(batch->positions);
  if (positions.device() == table_->data.device()) return positions;
  return positions.clone(table_->data.device().is_cuda() ? gpu_allocator() : host_allocator());
}

Tensor PositionEmbedding::forward(const Tensor& x, Context& ctx) {
  Tensor y = x.clone(*ctx.state().activations);
  if (const Tensor positions = token_positions(ctx); positions.defined()) {
    ops::embedding_forward(y, positions, table_->data, /*accumulate=*/true);
    return y;
  }
  for_each_run(y, [&](Tensor rows, std::int64_t first) { ops::position_embedding_forward(rows, table_->data, first); });
  return y;
}

Tensor PositionEmbedding::backward(const Tensor& dy, Context& ctx) {
  if (table_->frozen) return dy;
  if (const Tensor positions = token_positions(ctx); positions.defined()) {
    ops::embedding_backward(table_->grad, dy, positions);
    return dy;
  }
  for_each_run(dy, [&](const Tensor& rows, std::int64_t first) {
    ops::position_embedding_backward(table_->grad, rows, first);
  });
  return dy;
}

}  // namespace tidal::nn
