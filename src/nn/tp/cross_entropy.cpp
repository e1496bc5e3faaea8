#include "nn/tp/cross_entropy.h"

#include "core/error.h"
#include "nn/context.h"
#include "ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
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
  const std::int64_t computed = has_values(logits) ? N : 0;  // none on meta tensors (a planned step)
  // The targets and the per-row figures (N values each) are combined on the host: copied from and
  // back to a GPU's memory.
  const Tensor global_here = on_host(mine);
  const std::int32_t* global = global_here.data<std::int32_t>();
  // Targets in this rank's classes, re-based; the others marked as elsewhere (or ignored).
  Tensor targets = ctx.empty({N}, DType::i32);
  Tensor targets_here = on_host(targets, false);
  std::int32_t* local = targets_here.data<std::int32_t>();
  for (std::int64_t i = 0; i < computed; ++i) {
    const std::int64_t t = global[i];
    TIDAL_CHECK(t == ops::kIgnoreIndex || (t >= 0 && t < classes_), "target {} at position {} is outside the {} "
                "classes [0, {}): check model.vocab_size (or model.num_classes) against the data", t, i, classes_,
                classes_);
    local[i] = t == ops::kIgnoreIndex                    ? ops::kIgnoreIndex
               : (t >= first_ && t < first_ + local_) ? std::int32_t(t - first_)
                                                        : ops::kTargetElsewhere;
  }
  from_host(targets, targets_here);
  Tensor losses = ctx.empty({N}), lse = ctx.empty({N});
  if (real_ == 0) {  // every class here is padding: nothing to add to the sum
    losses.zero_();
    lse.fill_(-std::numeric_limits<float>::infinity());
  } else {
    ops::cross_entropy_forward(losses, lse, real_ < local_ ? logits2.slice(1, 0, real_).clone() : logits2, targets);
  }

  // Global log-sum-exp per row: m = max over ranks, then log of the summed exp(lse_r - m).
  Tensor lse_here = on_host(lse);
  const Tensor losses_here = on_host(losses);
  Allocator& here = host_side(lse);
  Tensor m = lse_here.clone(here);
  group_.all_reduce(m, {.op = comm::ReduceOp::max})->wait();
  Tensor sum = Tensor::empty({N}, DType::f32, here);
  // This rank's target logit (lse_r - loss_r where it holds the target), summed over ranks.
  Tensor target_logit = Tensor::zeros({N}, DType::f32, here);
  float *pl = lse_here.data<float>(), *pm = m.data<float>(), *ps = sum.data<float>(), *pz = target_logit.data<float>();
  const float* ploss = losses_here.data<float>();
  for (std::int64_t i = 0; i < computed; ++i) {
    ps[i] = std::exp(pl[i] - pm[i]);
    if (local[i] >= 0) pz[i] = pl[i] - ploss[i];
  }
  group_.all_reduce(sum)->wait();
  group_.all_reduce(target_logit)->wait();
  if (computed < N) total.count += double(N);  // a planned step's: every target counts
  for (std::int64_t i = 0; i < computed; ++i) {
    pl[i] = pm[i] + std::log(ps[i]);  // lse now holds the global log-sum-exp
    if (global[i] != ops::kIgnoreIndex) {
      total.sum += double(pl[i]) - double(pz[i]);
      total.count += 1;
    }
  }
  from_host(lse, lse_here);
  ctx.saved = {logits, lse, targets};
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
