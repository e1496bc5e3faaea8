#include "nn/lora.h"

#include "core/error.h"
#include "nn/dropout.h"
#include "nn/tp/mappings.h"
#include "ops/gemm.h"

#include <cmath>

namespace tidal::nn {

namespace {

int parts(const AdapterSplit::Features& f) { return f.group ? f.group->size() : 1; }
int block_index(const AdapterSplit::Features& f) { return f.group ? f.group->rank() : 0; }

}  // namespace

LowRankAdapter::LowRankAdapter(const Parameter& weight, std::vector<LoraTarget> targets, const LoraOptions& options,
                               const AdapterSplit& split)
    : split_(split), rank_(options.rank), scale_(options.alpha / float(options.rank)), targets_(std::move(targets)) {
  TIDAL_ASSERT(rank_ > 0 && !targets_.empty(), "an adapter of rank {} over {} targets", rank_, targets_.size());
  const Shape full = weight.full_shape.size() ? weight.full_shape : weight.shape;
  const int segments = weight.segments;
  TIDAL_ASSERT(full[1] % parts(split_.in) == 0 && full[0] % (segments * parts(split_.out)) == 0,
               "{}: {} over {} input and {} output blocks", weight.name, full.str(), parts(split_.in), parts(split_.out));
  in_ = full[1] / parts(split_.in);
  out_ = full[0] / parts(split_.out);
  // B's rows split: each segment's block of s rows of S, as the linear's output features (nn/parameter.h).
  const std::int64_t S = full[0] / segments, s = S / parts(split_.out);
  std::int64_t end = 0;
  for (LoraTarget& t : targets_) {
    TIDAL_ASSERT(t.first_row >= end && t.rows > 0 && t.first_row + t.rows <= full[0], "{}: rows [{}, {}) of {}",
                 t.name, t.first_row, t.first_row + t.rows, full[0]);
    end = t.first_row + t.rows;
    // PEFT: nn.init.kaiming_uniform_(A, a=sqrt(5)), a bound of sqrt(6 / ((1 + 5) in)) = 1 / sqrt(in).
    Parameter& a = add_parameter(t.name + ".A", {rank_, in_}, ParameterInit::uniform(1.0f / std::sqrt(float(full[1]))));
    Parameter& b = add_parameter(t.name + ".B", {t.rows, rank_}, ParameterInit::zeros());
    if (parts(split_.in) > 1) {
      a.full_shape = {rank_, full[1]};
      a.offset = {0, block_index(split_.in) * in_};
    }
    if (parts(split_.out) > 1) {
      TIDAL_ASSERT(t.first_row % S == 0 && t.rows % S == 0, "{}: rows [{}, {}) are not whole segments of {}", t.name,
                   t.first_row, t.first_row + t.rows, S);
      b.full_shape = {t.rows, rank_};
      b.offset = {block_index(split_.out) * s, 0};
      b.segments = int(t.rows / S);
      b.shape = {b.segments * s, rank_};
      t = {.name = t.name, .first_row = t.first_row / S * s, .rows = b.segments * s};
    }
    a.copies = split_.in.copies;
    a.replicas = split_.in.replicas;
    b.copies = split_.out.copies;
    b.replicas = split_.out.replicas;
    // A mixture's expert (nn/moe.h): its adapters go where it goes, summed over the same ranks.
    a.expert_group = b.expert_group = weight.expert_group;
    a_.push_back(&a);
    b_.push_back(&b);
  }
  if (options.dropout > 0.0f) dropout_ = &add_module("dropout", std::make_unique<Dropout>(options.dropout));
}

Tensor LowRankAdapter::to_output(Tensor h) const {
  if (split_.samples_cross)
    return tp::reduce_scatter_along(tp::all_gather_along(h, *split_.out.group, 0), *split_.in.group, 0);
  if (parts(split_.in) > 1) return tp::ReduceFromGroup::forward(std::move(h), *split_.in.group);  // the parts summed
  return h;
}

Tensor LowRankAdapter::to_input(Tensor dh) const {
  if (split_.samples_cross)
    return tp::reduce_scatter_along(tp::all_gather_along(dh, *split_.in.group, 0), *split_.out.group, 0);
  if (parts(split_.out) > 1) return tp::CopyToGroup::backward(std::move(dh), *split_.out.group);  // every block's rows
  return dh;
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
    h = to_output(std::move(h));
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
    dh = to_input(std::move(dh));
    ops::gemm(a_[i]->grad, dh, x2, {.trans_a = true, .beta = 1.0f});                 // dA += dh^T x
    ops::gemm(dx2, dh, a_[i]->data, {.beta = i == 0 ? 0.0f : 1.0f});                 // dx (+)= dh A
  }
  ctx.saved.clear();
  return dropout_ ? ctx.backward(*dropout_, dxd, 0) : dxd;
}

}  // namespace tidal::nn
