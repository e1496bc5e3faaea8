#include "nn/loss.h"

#include "core/error.h"
#include "ops/cross_entropy.h"

#include <algorithm>

namespace tidal::nn {

std::int64_t valid_targets(const Batch& batch) {
  const Tensor targets = on_host(batch.targets);
  if (!has_values(targets)) return targets.numel();  // a planned step's: every target counts
  const std::int32_t* t = targets.data<std::int32_t>();
  return std::count_if(t, t + targets.numel(), [](std::int32_t v) { return v != ops::kIgnoreIndex; });
}

Tensor Loss::targets(const Batch& batch) const {
  TIDAL_ASSERT(batch.targets.defined(), "{}: a loss without targets", path());
  Tensor mine = part_.of(batch.targets);
  return mine.reshape({mine.numel()});
}

LossSum Loss::over_replica(LossSum mine, Device device) const {
  if (batch_groups_.empty()) return mine;
  Tensor sums = Tensor::empty({2}, DType::f32, host_memory_for(device));
  const bool values = has_values(sums);  // not on meta memory: a planned step issues the sums alone
  if (values) {
    sums.data<float>()[0] = float(mine.sum);
    sums.data<float>()[1] = float(mine.count);
  }
  for (comm::Communicator* g : batch_groups_) g->all_reduce(sums)->wait();
  return values ? LossSum{.sum = sums.data<float>()[0], .count = sums.data<float>()[1]} : mine;
}

Loss::Mean Loss::replica_mean(LossSum mine, Context& ctx) const {
  const LossSum all = over_replica(mine, ctx.state().activations->device());
  Tensor loss = ctx.empty({1});
  loss.fill_(all.count > 0 ? float(all.sum / all.count) : 0.0f);
  return {.loss = loss, .count = float(all.count)};
}

Tensor Loss::forward(const Tensor& logits, Context& ctx) {
  TIDAL_ASSERT(ctx.state().batch, "{}: a loss without a batch", path());
  const Tensor t = targets(*ctx.state().batch);
  TIDAL_CHECK(t.numel() * logits.dim(-1) == logits.numel(), "{} targets for {} predictions", t.numel(),
              logits.numel() / logits.dim(-1));
  LossSum mine;
  add_rows(mine, logits, t, ctx.child(0));
  const Mean mean = replica_mean(mine, ctx);
  ctx.saved = {Tensor::full({1}, mean.count, host_allocator())};
  return mean.loss;
}

Tensor Loss::backward(const Tensor& dloss, Context& ctx) {
  TIDAL_ASSERT(ctx.saved.size() == 1, "{}: backward without its forward", path());
  const float count = ctx.saved[0].item();
  ctx.saved.clear();
  Tensor dlogits = gradient(gradient_scale(dloss, count), ctx.child(0));
  ctx.clear();
  return dlogits;
}

}  // namespace tidal::nn
