#include "nn/embedding.h"

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
  ops::embedding_backward(table_->grad, dy, ctx.saved.at(0));
  ctx.saved.clear();
  return {};
}

PositionEmbedding::PositionEmbedding(std::int64_t max_positions, std::int64_t dim, ParameterInit init,
                                     BatchSlice positions)
    : table_(&add_parameter("weight", {max_positions, dim}, init)), positions_(positions) {}

Tensor PositionEmbedding::forward(const Tensor& x, Context& ctx) {
  Tensor y = x.clone(*ctx.state().activations);
  ops::position_embedding_forward(y, table_->data, first_position(x));
  return y;
}

Tensor PositionEmbedding::backward(const Tensor& dy, Context&) {
  ops::position_embedding_backward(table_->grad, dy, first_position(dy));
  return dy;
}

}  // namespace tidal::nn
