#include "nn/lm_head.h"

#include "ops/bias.h"
#include "ops/gemm.h"

namespace tidal::nn {

TiedLmHead::TiedLmHead(Parameter& table, bool bias)
    : table_(table), bias_(bias ? &add_parameter("bias", {table.shape[0]}, ParameterInit::zeros()) : nullptr) {}

std::vector<Parameter*> TiedLmHead::used_parameters() {
  std::vector<Parameter*> out{&table_};
  if (bias_) out.push_back(bias_);
  return out;
}

Tensor TiedLmHead::forward(const Tensor& x, Context& ctx) {
  const std::int64_t V = table_.shape[0], C = table_.shape[1];
  Shape s = x.shape();
  s[s.size() - 1] = V;
  Tensor y = ctx.empty(s, x.dtype());
  Tensor y2 = y.reshape({-1, V});
  ops::gemm(y2, x.reshape({-1, C}), table_.data, {.trans_b = true});
  if (bias_) ops::bias_add(y2, bias_->data);
  ctx.saved = {x};
  return y;
}

Tensor TiedLmHead::backward(const Tensor& dy, Context& ctx) {
  const std::int64_t V = table_.shape[0], C = table_.shape[1];
  const Tensor& x = ctx.saved.at(0);
  Tensor dx = ctx.empty(x.shape(), x.dtype());
  Tensor dx2 = dx.reshape({-1, C}), dy2 = dy.reshape({-1, V});
  ops::gemm(dx2, dy2, table_.data);
  ops::gemm(table_.grad, dy2, x.reshape({-1, C}), {.trans_a = true, .beta = 1.0f});
  if (bias_) ops::bias_grad(bias_->grad, dy2);
  ctx.saved.clear();
  return dx;
}

}  // namespace tidal::nn
