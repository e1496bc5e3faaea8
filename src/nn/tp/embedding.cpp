#include "nn/tp/embedding.h"

#include "core/error.h"
#include "nn/context.h"
#include "nn/tp/mappings.h"
#include "ops/embedding.h"

namespace tidal::nn::tp {

VocabParallelEmbedding::VocabParallelEmbedding(std::int64_t num, std::int64_t dim, ParameterInit init,
                                               comm::Communicator& group)
    : group_(group), local_(num / group.size()), first_(group.rank() * (num / group.size())) {
  TIDAL_CHECK(num % group.size() == 0, "vocab-parallel embedding: {} rows do not split over the {} ranks of tensor "
              "group '{}' (pad model.vocab_size to a multiple of {})", num, group.size(), group.name(), group.size());
  table_ = &add_parameter("weight", {local_, dim}, init);
  table_->full_shape = {num, dim};
  table_->offset = {first_, 0};
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids, Context& ctx) {
  Tensor local = Tensor::empty(ids.shape(), DType::i32);
  const std::int32_t* g = ids.data<std::int32_t>();
  std::int32_t* l = local.data<std::int32_t>();
  const std::int64_t V = local_ * group_.size();
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    TIDAL_CHECK(g[i] >= 0 && g[i] < V, "token id {} at position {} is outside the vocabulary [0, {}): check "
                "model.vocab_size against the data", g[i], i, V);
    l[i] = g[i] >= first_ && g[i] < first_ + local_ ? std::int32_t(g[i] - first_) : ops::kIdElsewhere;
  }
  Shape s = ids.shape();
  s.push_back(table_->shape[1]);
  Tensor partial = ctx.empty(s, table_->data.dtype());
  ops::embedding_forward(partial, local, table_->data);
  ctx.saved = {local};
  return ReduceFromGroup::forward(partial, group_);
}

Tensor VocabParallelEmbedding::backward(const Tensor& dy, Context& ctx) {
  ops::embedding_backward(table_->grad, ReduceFromGroup::backward(dy, group_), ctx.saved.at(0));
  ctx.saved.clear();
  return {};
}

}  // namespace tidal::nn::tp
