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

void add_row_losses(LossSum& total, const Tensor& losses, const Tensor& targets) {
  const Tensor host_losses = on_host(losses), host_targets = on_host(targets);
  if (!has_values(host_losses)) {
    total.count += double(losses.numel());
    return;
  }
  const float* pl = host_losses.data<float>();
  const std::int32_t* pt = host_targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < losses.numel(); ++i)
    if (pt[i] != ops::kIgnoreIndex) {
      total.sum += pl[i];
      total.count += 1;
    }
}

std::vector<double> sum_over_groups(std::vector<double> values, const std::vector<comm::Communicator*>& groups,
                                    Device device) {
  if (groups.empty()) return values;
  Tensor sums = Tensor::empty({std::int64_t(values.size())}, DType::f32, host_memory_for(device));
  const bool held = has_values(sums);  // not on meta memory: a planned step issues the sums alone
  if (held) std::copy(values.begin(), values.end(), sums.data<float>());
  for (comm::Communicator* g : groups) g->all_reduce(sums)->wait();
  if (held) std::copy_n(sums.data<float>(), values.size(), values.begin());
  return values;
}

LossSum Loss::over_replica(LossSum mine, Device device) const {
  const std::vector<double> all = sum_over_groups({mine.sum, mine.count}, batch_groups_, device);
  return {.sum = all[0], .count = all[1]};
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
