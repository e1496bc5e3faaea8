#include "nn/tp/embedding.h"

#include "nn/context.h"
#include "nn/tp/mappings.h"
#include "ops/embedding.h"

namespace tidal::nn::tp {

VocabParallelEmbedding::VocabParallelEmbedding(std::int64_t num, std::int64_t dim, ParameterInit init,
                                               comm::Communicator& group)
    : group_(group), local_(padded_vocab(num, group.size()) / group.size()), first_(group.rank() * local_) {
  table_ = &add_parameter("weight", {local_, dim}, init);
  table_->full_shape = {num, dim};
  table_->offset = {first_, 0};
}

Tensor localize_ids(const Tensor& ids, std::int64_t first, std::int64_t count, std::int64_t vocab) {
  Tensor local = Tensor::empty(ids.shape(), DType::i32);
  ops::embedding_shard_ids(local, ids, first, count, vocab);
  return local;
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids, Context& ctx) {
  const Tensor local = localize_ids(ids, first_, local_, table_->full_shape[0]);
  Shape s = ids.shape();
  s.push_back(table_->shape[1]);
  Tensor partial = ctx.empty(s, table_->data.dtype());
  ops::embedding_forward(partial, local, table_->data);
  ctx.saved = {local};
  return ReduceFromGroup::forward(std::move(partial), group_);
}

Tensor VocabParallelEmbedding::backward(const Tensor& dy, Context& ctx) {
  if (!table_->frozen) ops::embedding_backward(table_->grad, ReduceFromGroup::backward(dy, group_), ctx.saved.at(0));
  ctx.saved.clear();
  return {};
}

}  // namespace tidal::nn::tp
