#include "nn/lm_head.h"

#include "nn/linear.h"

namespace tidal::nn {

TiedLmHead::TiedLmHead(Parameter& table, bool bias)
    : table_(table), bias_(bias ? &add_parameter("bias", {table.shape[0]}, ParameterInit::zeros()) : nullptr) {
  if (bias_ && table.full_shape.size()) {  // rows [offset, offset + V') of the table: the bias's too
    bias_->full_shape = {table.full_shape[0]};
    bias_->offset = {table.offset.size() ? table.offset[0] : 0};
  }
}

std::vector<Parameter*> TiedLmHead::used_parameters() {
  std::vector<Parameter*> out{&table_};
  if (bias_) out.push_back(bias_);
  return out;
}

Tensor TiedLmHead::forward(const Tensor& x, Context& ctx) {
  const std::int64_t V = table_.shape[0], C = table_.shape[1];
  Tensor y = ctx.empty(x.shape().with_last(V), x.dtype());
  Tensor y2 = y.reshape({-1, V});
  // The table is the weight [V, C]; the output layer stays out of fp8 (as torchtitan keeps it).
  linear_forward(y2, x.reshape({-1, C}), table_, bias_, false);
  ctx.saved = {x};
  return y;
}

Tensor TiedLmHead::backward(const Tensor& dy, Context& ctx) {
  const std::int64_t V = table_.shape[0], C = table_.shape[1];
  const Tensor& x = ctx.saved.at(0);
  Tensor dx = ctx.empty(x.shape(), x.dtype());
  Tensor dx2 = dx.reshape({-1, C});
  linear_backward(dx2, dy.reshape({-1, V}), x.reshape({-1, C}), table_, bias_, ctx, false);
  ctx.saved.clear();
  return dx;
}

UntiedLmHead::UntiedLmHead(std::unique_ptr<TableLookup> table, const HeadOn& head_on) {
  TableLookup& t = add_module("", std::move(table));
  t.keep_for_head();
  head_ = &add_module("", head_on(t));
}

}  // namespace tidal::nn
