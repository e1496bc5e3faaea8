#include "nn/chunked_loss.h"

#include "core/error.h"

#include <algorithm>

namespace tidal::nn {
namespace {

enum LossSlot : std::size_t { kHead, kLoss };

// Rows [begin, end) of block b when n rows are cut into `blocks` nearly equal runs.
std::pair<std::int64_t, std::int64_t> block_rows(int b, int blocks, std::int64_t n) {
  return {n * b / blocks, n * (b + 1) / blocks};
}

}  // namespace

ChunkedLoss::ChunkedLoss(std::string head_name, std::unique_ptr<Module> head, std::unique_ptr<Loss> loss, int blocks)
    : head_(&add_module(std::move(head_name), std::move(head))), loss_(&add_module("loss", std::move(loss))),
      blocks_(blocks) {
  TIDAL_ASSERT(blocks >= 1, "the output layer over {} blocks", blocks);
}

Tensor ChunkedLoss::forward(const Tensor& x, Context& ctx) {
  TIDAL_ASSERT(ctx.state().batch, "{}: a loss without a batch", path());
  const Tensor targets = loss_->targets(*ctx.state().batch);
  const Tensor rows = x.reshape({-1, x.dim(-1)});
  TIDAL_CHECK(targets.numel() == rows.dim(0), "{} targets for {} predictions", targets.numel(), rows.dim(0));
  LossSum mine;
  for (int b = 0; b < blocks_; ++b) {
    const auto [begin, end] = block_rows(b, blocks_, rows.dim(0));
    const Tensor logits = ctx.forward(*head_, rows.slice(0, begin, end), kHead);
    loss_->add_rows(mine, logits, targets.slice(0, begin, end), ctx.child(kLoss));
    ctx.clear();  // this block's logits go; backward makes them again
  }
  const Loss::Mean mean = loss_->replica_mean(mine, ctx);
  if (ctx.state().training) ctx.saved = {x, targets, Tensor::full({1}, mean.count, host_allocator())};
  return mean.loss;
}

Tensor ChunkedLoss::backward(const Tensor& dloss, Context& ctx) {
  TIDAL_ASSERT(ctx.saved.size() == 3, "{}: backward without its forward", path());
  const Tensor x = ctx.saved[0], targets = ctx.saved[1];
  const float scale = Loss::gradient_scale(dloss, ctx.saved[2].item());
  ctx.saved.clear();
  const Tensor rows = x.reshape({-1, x.dim(-1)});
  Tensor dx = ctx.empty(x.shape(), x.dtype());
  Tensor drows = dx.reshape({-1, x.dim(-1)});
  for (int b = 0; b < blocks_; ++b) {
    const auto [begin, end] = block_rows(b, blocks_, rows.dim(0));
    Context& part = ctx.part_child(0, b + 1 < blocks_);
    {
      LossSum again;  // the same sums as forward's; only the saved log-sum-exp is wanted
      const Tensor logits = part.forward(*head_, rows.slice(0, begin, end), kHead);
      loss_->add_rows(again, logits, targets.slice(0, begin, end), part.child(kLoss));
    }  // the loss holds the only reference to the logits: their gradient is written over them
    const Tensor dlogits = loss_->gradient(scale, part.child(kLoss));
    drows.slice(0, begin, end).copy_from(part.backward(*head_, dlogits, kHead));
    ctx.clear();
  }
  return dx;
}

}  // namespace tidal::nn
