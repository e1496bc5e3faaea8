#include "nn/cross_entropy_loss.h"

#include "ops/cross_entropy.h"

#include <algorithm>

namespace tidal::nn {

namespace {
// The tensor itself on the host, or a host copy of a GPU tensor.
Tensor on_host(const Tensor& t) { return t.device().is_cuda() ? t.clone(host_allocator()) : t; }
}  // namespace

std::int64_t valid_targets(const Batch& batch) {
  const Tensor targets = on_host(batch.targets);
  const std::int32_t* t = targets.data<std::int32_t>();
  return std::count_if(t, t + targets.numel(), [](std::int32_t v) { return v != ops::kIgnoreIndex; });
}

Tensor CrossEntropyLoss::forward(const Tensor& logits, Context& ctx) {
  const Batch* batch = ctx.state().batch;
  TIDAL_ASSERT(batch && batch->targets.defined(), "cross-entropy loss without targets");
  const std::int64_t V = logits.dim(-1);
  Tensor logits2 = logits.reshape({-1, V});
  const std::int64_t N = logits2.dim(0);
  Tensor targets = part_.of(batch->targets);
  TIDAL_CHECK(targets.numel() == N, "{} targets for {} predictions", targets.numel(), N);
  targets = targets.reshape({N});
  Tensor losses = ctx.empty({N}), lse = ctx.empty({N});
  ops::cross_entropy_forward(losses, lse, logits2, targets);
  // Summed on the host in double, in row order, whichever device computed the rows.
  double sum = 0.0;
  std::int64_t valid = 0;
  const Tensor host_losses = on_host(losses), host_targets = on_host(targets);
  const float* pl = host_losses.data<float>();
  const std::int32_t* pt = host_targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < N; ++i) {
    sum += pl[i];
    valid += pt[i] != ops::kIgnoreIndex;
  }
  double all_valid = double(valid);
  if (!batch_groups_.empty()) {  // over the replica's micro-batch: add every other part's sum and count
    Tensor sums = Tensor::empty({2}, DType::f32, host_allocator());
    sums.data<float>()[0] = float(sum);
    sums.data<float>()[1] = float(valid);
    for (comm::Communicator* g : batch_groups_) g->all_reduce(sums)->wait();
    sum = sums.data<float>()[0];
    all_valid = sums.data<float>()[1];
  }
  Tensor loss = ctx.empty({1});
  loss.fill_(all_valid > 0 ? float(sum / all_valid) : 0.0f);
  Tensor count = Tensor::full({1}, float(all_valid), host_allocator());
  ctx.saved = {logits, lse, targets, count};
  return loss;
}

Tensor CrossEntropyLoss::backward(const Tensor& dloss, Context& ctx) {
  const Tensor &logits = ctx.saved.at(0), &lse = ctx.saved.at(1), &targets = ctx.saved.at(2);
  const float valid = ctx.saved.at(3).item();
  // When this loss holds the only reference to the logits, their gradient is written over them:
  // the peak keeps one [N, V] block, not two.
  Tensor dlogits = logits.unshared() ? logits : ctx.empty(logits.shape(), logits.dtype());
  Tensor d2 = dlogits.reshape({-1, logits.dim(-1)});
  ops::cross_entropy_backward(d2, logits.reshape({-1, logits.dim(-1)}), lse, targets,
                              valid > 0 ? dloss.item() / valid : 0.0f);
  ctx.saved.clear();
  return dlogits;
}

}  // namespace tidal::nn
