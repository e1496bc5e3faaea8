#include "nn/tp/cross_entropy.h"

#include "core/error.h"
#include "nn/context.h"
#include "ops/cross_entropy.h"

#include <algorithm>
#include <limits>

namespace tidal::nn::tp {

VocabParallelCrossEntropy::VocabParallelCrossEntropy(std::int64_t classes, std::int64_t padded,
                                                     comm::Communicator& group, BatchSlice samples,
                                                     std::vector<comm::Communicator*> batch_groups)
    : Loss(samples, std::move(batch_groups)), group_(group), classes_(classes), local_(padded / group.size()),
      first_(group.rank() * local_), real_(std::clamp<std::int64_t>(classes - first_, 0, local_)) {
  TIDAL_ASSERT(padded >= classes && padded % group.size() == 0, "{} classes padded to {} over the {} ranks of '{}'",
               classes, padded, group.size(), group.name());
}

void VocabParallelCrossEntropy::add_rows(LossSum& total, const Tensor& logits, const Tensor& mine, Context& ctx) {
  TIDAL_ASSERT(logits.dim(-1) == local_, "{}: logits {} for {} classes per rank", path(), logits.str(), local_);
  Tensor logits2 = logits.reshape({-1, local_});
  const std::int64_t N = logits2.dim(0);
  // Targets in this rank's classes, re-based; the others marked as elsewhere (or ignored).
  Tensor targets = ctx.empty({N}, DType::i32);
  ops::cross_entropy_shard_targets(targets, mine, first_, local_, classes_);
  Tensor losses = ctx.empty({N}), lse = ctx.empty({N});
  if (real_ == 0) {  // every class here is padding: nothing to add to the sum
    losses.zero_();
    lse.fill_(-std::numeric_limits<float>::infinity());
  } else {
    ops::cross_entropy_forward(losses, lse, real_ < local_ ? logits2.slice(1, 0, real_).clone() : logits2, targets);
  }
  // The global log-sum-exp per row, m + log of the summed exp(lse_r - m) with m the maximum over
  // the ranks, and the target's logit from the rank holding it: on the logits' device.
  Tensor max_lse = lse.clone(*ctx.state().activations);
  group_.all_reduce(max_lse, {.op = comm::ReduceOp::max})->wait();
  Tensor terms = ctx.empty({N, 2});
  ops::cross_entropy_shard_terms(terms, lse, max_lse, losses, targets);
  group_.all_reduce(terms)->wait();
  ops::cross_entropy_shard_combine(lse, losses, max_lse, terms, targets);
  ctx.saved = {logits, lse, targets};
  add_row_losses(total, losses, mine);  // on the host in double, as CrossEntropyLoss sums them
}

Tensor VocabParallelCrossEntropy::gradient(float scale, Context& ctx) {
  const Tensor &logits = ctx.saved.at(0), &lse = ctx.saved.at(1), &targets = ctx.saved.at(2);
  // Written over the logits when this loss holds the only reference to them (and no padding
  // classes need zeros), as in CrossEntropyLoss.
  Tensor dlogits = real_ == local_ && logits.unshared() ? logits : ctx.empty(logits.shape(), logits.dtype());
  Tensor d2 = dlogits.reshape({-1, local_});
  const Tensor logits2 = logits.reshape({-1, local_});
  if (real_ == local_) {
    ops::cross_entropy_backward(d2, logits2, lse, targets, scale);
  } else {  // the classes below V, and zeros for the padding
    d2.zero_();
    if (real_ > 0) {
      Tensor d_real = ctx.empty({d2.dim(0), real_}, logits.dtype());
      ops::cross_entropy_backward(d_real, logits2.slice(1, 0, real_).clone(), lse, targets, scale);
      d2.slice(1, 0, real_).copy_from(d_real);
    }
  }
  ctx.saved.clear();
  return dlogits;
}

}  // namespace tidal::nn::tp
