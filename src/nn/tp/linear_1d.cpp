#include "nn/tp/linear_1d.h"

#include "core/error.h"
#include "nn/context.h"
#include "nn/linear.h"
#include "nn/tp/mappings.h"
#include "ops/bias.h"

namespace tidal::nn::tp {
namespace {

std::int64_t part(std::int64_t n, const comm::Communicator& g, const char* what) {
  TIDAL_CHECK(n % g.size() == 0, "{}: {} features do not split over the {} ranks of tensor group '{}'", what, n,
              g.size(), g.name());
  return n / g.size();
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init,
                                           comm::Communicator& group, bool gather_output, int segments)
    : group_(group), in_(in), out_local_(part(out / segments, group, "column-parallel linear") * segments),
      gather_output_(gather_output) {
  TIDAL_ASSERT(out % segments == 0 && !(gather_output && segments > 1), "column-parallel linear: {} outputs in {} segments",
               out, segments);
  const std::int64_t first = group.rank() * (out_local_ / segments);  // within each segment
  weight_ = &add_parameter("weight", {out_local_, in}, init);
  weight_->full_shape = {out, in};
  weight_->offset = {first, 0};
  weight_->segments = segments;
  bias_ = nullptr;
  if (bias) {
    bias_ = &add_parameter("bias", {out_local_}, ParameterInit::zeros());
    bias_->full_shape = {out};
    bias_->offset = {first};
    bias_->segments = segments;
  }
}

Tensor ColumnParallelLinear::forward(const Tensor& x, Context& ctx) {
  TIDAL_ASSERT(x.dim(-1) == in_, "{}: input {} for {} features", path(), x.str(), in_);
  const Tensor xin = CopyToGroup::forward(x, group_);
  Tensor y = ctx.empty(x.shape().with_last(out_local_), x.dtype());
  Tensor y2 = y.reshape({-1, out_local_});
  linear_forward(y2, xin.reshape({-1, in_}), *weight_, bias_, ctx.state().fp8_linears);
  ctx.saved = {xin};
  return gather_output_ ? GatherFromGroup::forward(y, group_, -1) : y;
}

Tensor ColumnParallelLinear::backward(const Tensor& dy, Context& ctx) {
  const Tensor& x = ctx.saved.at(0);
  const Tensor dy_local = gather_output_ ? GatherFromGroup::backward(dy, group_, -1) : dy;
  Tensor x2 = x.reshape({-1, in_}), dy2 = dy_local.reshape({-1, out_local_});
  Tensor dx = ctx.empty(x.shape(), x.dtype());
  Tensor dx2 = dx.reshape({-1, in_});
  linear_backward(dx2, dy2, x2, *weight_, bias_, ctx, ctx.state().fp8_linears);  // this rank's part of dx; dW_r += dy_r^T x
  ctx.saved.clear();
  return CopyToGroup::backward(std::move(dx), group_);  // sum of the ranks' parts
}

AdapterSplit ColumnParallelLinear::adapter_split() const {
  const AdapterSplit::Features whole{.group = nullptr, .replicas = {}, .copies = group_.size()};
  if (gather_output_) return {.in = whole, .out = whole};  // the input and the output replicated
  return {.in = whole, .out = {.group = &group_, .replicas = {}, .copies = 1}};
}

RowParallelLinear::RowParallelLinear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init,
                                     comm::Communicator& group, bool split_input)
    : group_(group), in_local_(part(in, group, "row-parallel linear")), out_(out), split_input_(split_input) {
  weight_ = &add_parameter("weight", {out, in_local_}, init);
  weight_->full_shape = {out, in};
  weight_->offset = {0, group.rank() * in_local_};
  bias_ = bias ? &add_parameter("bias", {out}, ParameterInit::zeros()) : nullptr;
  if (bias_) bias_->copies = group.size();
}

Tensor RowParallelLinear::forward(const Tensor& x, Context& ctx) {
  const Tensor xr = split_input_ ? ScatterToGroup::forward(x, group_, -1) : x;
  TIDAL_ASSERT(xr.dim(-1) == in_local_, "{}: input {} for {} features per rank", path(), xr.str(), in_local_);
  Tensor partial = ctx.empty(xr.shape().with_last(out_), xr.dtype());
  Tensor partial2 = partial.reshape({-1, out_});
  linear_forward(partial2, xr.reshape({-1, in_local_}), *weight_, nullptr,
                 ctx.state().fp8_linears);  // the bias is added once, after the sum
  Tensor y = ReduceFromGroup::forward(std::move(partial), group_);
  if (bias_) {
    Tensor y2 = y.reshape({-1, out_});
    ops::bias_add(y2, bias_->data);
  }
  ctx.saved = {xr};
  return y;
}

Tensor RowParallelLinear::backward(const Tensor& dy, Context& ctx) {
  const Tensor& xr = ctx.saved.at(0);
  const Tensor g = ReduceFromGroup::backward(dy, group_);
  Tensor x2 = xr.reshape({-1, in_local_}), dy2 = g.reshape({-1, out_});
  Tensor dx = ctx.empty(xr.shape(), xr.dtype());
  Tensor dx2 = dx.reshape({-1, in_local_});
  linear_backward(dx2, dy2, x2, *weight_, bias_, ctx, ctx.state().fp8_linears);  // dx_r = dy W_r; dW_r += dy^T x_r
  ctx.saved.clear();
  return split_input_ ? ScatterToGroup::backward(dx, group_, -1) : dx;
}

AdapterSplit RowParallelLinear::adapter_split() const {
  const AdapterSplit::Features whole{.group = nullptr, .replicas = {}, .copies = group_.size()};
  if (split_input_) return {.in = whole, .out = whole};  // the input and the output replicated
  return {.in = {.group = &group_, .replicas = {}, .copies = 1}, .out = whole};
}

}  // namespace tidal::nn::tp
