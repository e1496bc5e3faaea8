#include "nn/lora.h"

#include "core/error.h"
#include "nn/dropout.h"
#include "nn/tp/mappings.h"
#include "ops/gemm.h"

#include <cmath>

namespace tidal::nn {

LowRankAdapter::LowRankAdapter(const Parameter& weight, std::vector<LoraTarget> targets, const LoraOptions& options,
                               comm::Communicator* group)
    : group_(group), in_(weight.shape[1]), out_(weight.shape[0]), rank_(options.rank),
      scale_(options.alpha / float(options.rank)), targets_(std::move(targets)) {
  TIDAL_ASSERT(rank_ > 0 && !targets_.empty(), "an adapter of rank {} over {} targets", rank_, targets_.size());
  const Shape full = weight.full_shape.size() ? weight.full_shape : weight.shape;
  if (full[0] != out_) split_ = Split::rows;
  else if (full[1] != in_) split_ = Split::columns;
  TIDAL_ASSERT(split_ == Split::none || group_ != nullptr, "{}: a split weight's adapter without its group", weight.name);
  // A split by rows: each segment's slice of s rows of S (the weight's own block, nn/parameter.h).
  const std::int64_t S = full[0] / weight.segments, s = out_ / weight.segments;
  std::int64_t end = 0;
  for (LoraTarget& t : targets_) {
    TIDAL_ASSERT(t.first_row >= end && t.rows > 0 && t.first_row + t.rows <= full[0], "{}: rows [{}, {}) of {}",
                 t.name, t.first_row, t.first_row + t.rows, full[0]);
    end = t.first_row + t.rows;
    // PEFT: nn.init.kaiming_uniform_(A, a=sqrt(5)), a bound of sqrt(6 / ((1 + 5) in)) = 1 / sqrt(in).
    Parameter& a = add_parameter(t.name + ".A", {rank_, in_}, ParameterInit::uniform(1.0f / std::sqrt(float(full[1]))));
    Parameter& b = add_parameter(t.name + ".B", {t.rows, rank_}, ParameterInit::zeros());
    if (split_ == Split::rows) {  // A whole on every rank; B's rows as the weight's, whole segments
      TIDAL_ASSERT(t.first_row % S == 0 && t.rows % S == 0, "{}: rows [{}, {}) are not whole segments of {}", t.name,
                   t.first_row, t.first_row + t.rows, S);
      a.copies = group_->size();
      b.full_shape = {t.rows, rank_};
      b.offset = {weight.offset[0], 0};
      b.segments = int(t.rows / S);
      b.shape = {b.segments * s, rank_};
      t = {.name = t.name, .first_row = t.first_row / S * s, .rows = b.segments * s};
    } else if (split_ == Split::columns) {  // A's columns as the weight's; B whole on every rank
      a.full_shape = {rank_, full[1]};
      a.offset = {0, weight.offset[1]};
      b.copies = group_->size();
    }
    // A mixture's expert (nn/moe.h): its adapters go where it goes, summed over the same ranks.
    a.expert_group = b.expert_group = weight.expert_group;
    a_.push_back(&a);
    b_.push_back(&b);
  }
  if (options.dropout > 0.0f) dropout_ = &add_module("dropout", std::make_unique<Dropout>(options.dropout));
}

Tensor LowRankAdapter::forward(const Tensor& x, Context& ctx) {
  TIDAL_ASSERT(x.dim(-1) == in_, "{}: input {} for {} features", path(), x.str(), in_);
  const Tensor xd = dropout_ ? ctx.forward(*dropout_, x, 0) : x;
  const Tensor x2 = xd.reshape({-1, in_});
  const std::int64_t N = x2.dim(0);
  Tensor y = ctx.empty(x.shape().with_last(out_), x.dtype());
  Tensor y2 = y.reshape({N, out_});
  if (!whole(0)) y.zero_();
  ctx.saved = {xd};
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const LoraTarget& t = targets_[i];
    Tensor h = ctx.empty({N, rank_}, x.dtype());
    ops::gemm(h, x2, a_[i]->data, {.trans_b = true});  // h = x A^T
    if (split_ == Split::columns) h = tp::ReduceFromGroup::forward(std::move(h), *group_);  // the ranks' parts summed
    if (whole(i)) {
      ops::gemm(y2, h, b_[i]->data, {.trans_b = true, .alpha = scale_});
    } else {  // the block's columns of y, by way of a contiguous block
      Tensor block = ctx.empty({N, t.rows}, x.dtype());
      ops::gemm(block, h, b_[i]->data, {.trans_b = true, .alpha = scale_});
      y2.slice(1, t.first_row, t.first_row + t.rows).copy_from(block);
    }
    ctx.saved.push_back(h);
  }
  return y;
}

Tensor LowRankAdapter::backward(const Tensor& dy, Context& ctx) {
  TIDAL_ASSERT(ctx.saved.size() == targets_.size() + 1, "{}: backward without its forward", path());
  const Tensor& xd = ctx.saved[0];
  const Tensor x2 = xd.reshape({-1, in_}), dy2 = dy.reshape({-1, out_});
  const std::int64_t N = x2.dim(0);
  Tensor dxd = ctx.empty(xd.shape(), xd.dtype());
  Tensor dx2 = dxd.reshape({N, in_});
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const LoraTarget& t = targets_[i];
    const Tensor& h = ctx.saved[i + 1];
    Tensor dyi = dy2;
    if (!whole(i)) {
      dyi = ctx.empty({N, t.rows}, dy.dtype());
      dyi.copy_from(dy2.slice(1, t.first_row, t.first_row + t.rows));
    }
    ops::gemm(b_[i]->grad, dyi, h, {.trans_a = true, .alpha = scale_, .beta = 1.0f});  // dB += s dy^T h
    Tensor dh = ctx.empty({N, rank_}, dy.dtype());
    ops::gemm(dh, dyi, b_[i]->data, {.alpha = scale_});                              // dh = s dy B
    if (split_ == Split::rows) dh = tp::CopyToGroup::backward(std::move(dh), *group_);  // over every rank's rows
    ops::gemm(a_[i]->grad, dh, x2, {.trans_a = true, .beta = 1.0f});                 // dA += dh^T x
    ops::gemm(dx2, dh, a_[i]->data, {.beta = i == 0 ? 0.0f : 1.0f});                 // dx (+)= dh A
  }
  ctx.saved.clear();
  return dropout_ ? ctx.backward(*dropout_, dxd, 0) : dxd;
}

}  // namespace tidal::nn
