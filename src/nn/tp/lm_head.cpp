#include "nn/tp/lm_head.h"

#include "nn/context.h"
#include "nn/linear.h"
#include "nn/tp/mappings.h"

namespace tidal::nn::tp {

VocabParallelLmHead::VocabParallelLmHead(Parameter& table, bool bias, comm::Communicator& group)
    : group_(group), table_(table), bias_(nullptr) {
  if (bias) {
    bias_ = &add_parameter("bias", {table.shape[0]}, ParameterInit::zeros());
    bias_->full_shape = {table.full_shape.size() ? table.full_shape[0] : table.shape[0]};
    bias_->offset = {table.offset.size() ? table.offset[0] : 0};
  }
}

std::vector<Parameter*> VocabParallelLmHead::used_parameters() {
  std::vector<Parameter*> out{&table_};
  if (bias_) out.push_back(bias_);
  return out;
}

Tensor VocabParallelLmHead::forward(const Tensor& x, Context& ctx) {
  const std::int64_t V = table_.shape[0], C = table_.shape[1];
  const Tensor xin = CopyToGroup::forward(x, group_);
  Tensor y = ctx.empty(x.shape().with_last(V), x.dtype());
  Tensor y2 = y.reshape({-1, V});
  linear_forward(y2, xin.reshape({-1, C}), table_, bias_);
  ctx.saved = {xin};
  return y;
}

Tensor VocabParallelLmHead::backward(const Tensor& dy, Context& ctx) {
  const std::int64_t V = table_.shape[0], C = table_.shape[1];
  const Tensor& x = ctx.saved.at(0);
  Tensor dx = ctx.empty(x.shape(), x.dtype());
  Tensor dx2 = dx.reshape({-1, C});
  linear_backward(dx2, dy.reshape({-1, V}), x.reshape({-1, C}), table_, bias_);
  ctx.saved.clear();
  return CopyToGroup::backward(dx, group_);
}

}  // namespace tidal::nn::tp
