#include "nn/cross_entropy_loss.h"

#include "ops/cross_entropy.h"

namespace tidal::nn {

void CrossEntropyLoss::add_rows(LossSum& total, const Tensor& logits, const Tensor& targets, Context& ctx) {
  const Tensor logits2 = logits.reshape({-1, logits.dim(-1)});
  const std::int64_t N = logits2.dim(0);
  Tensor losses = ctx.empty({N}), lse = ctx.empty({N});
  ops::cross_entropy_forward(losses, lse, logits2, targets);
  ctx.saved = {logits, lse, targets};
  add_row_losses(total, losses, targets);  // on the host in double, whichever device computed the rows
}

Tensor CrossEntropyLoss::gradient(float scale, Context& ctx) {
  const Tensor &logits = ctx.saved.at(0), &lse = ctx.saved.at(1), &targets = ctx.saved.at(2);
  // When this loss holds the only reference to the logits, their gradient is written over them:
  // the peak keeps one [N, V] block, not two.
  Tensor dlogits = logits.unshared() ? logits : ctx.empty(logits.shape(), logits.dtype());
  Tensor d2 = dlogits.reshape({-1, logits.dim(-1)});
  ops::cross_entropy_backward(d2, logits.reshape({-1, logits.dim(-1)}), lse, targets, scale);
  ctx.saved.clear();
  return dlogits;
}

}  // namespace tidal::nn
