#include "nn/cross_entropy_loss.h"

#include "ops/cross_entropy.h"

namespace tidal::nn {

void CrossEntropyLoss::add_rows(LossSum& total, const Tensor& logits, const Tensor& targets, Context& ctx) {
  const Tensor logits2 = logits.reshape({-1, logits.dim(-1)});
  const std::int64_t N = logits2.dim(0);
  Tensor losses = ctx.empty({N}), lse = ctx.empty({N});
  ops::cross_entropy_forward(losses, lse, logits2, targets);
  // Summed on the host in double, in row order, whichever device computed the rows.
  const Tensor host_losses = on_host(losses), host_targets = on_host(targets);
  ctx.saved = {logits, lse, targets};
  if (!has_values(host_losses)) {  // a planned step's: every target counts
    total.count += double(N);
    return;
  }
  const float* pl = host_losses.data<float>();
  const std::int32_t* pt = host_targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < N; ++i) {
    total.sum += pl[i];
    total.count += pt[i] != ops::kIgnoreIndex;
  }
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
