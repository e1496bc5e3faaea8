#include "nn/cross_entropy_loss.h"

#include "ops/cross_entropy.h"

#include <algorithm>

namespace tidal::nn {

std::int64_t valid_targets(const Batch& batch) {
  const std::int32_t* t = batch.targets.data<std::int32_t>();
  return std::count_if(t, t + batch.targets.numel(), [](std::int32_t v) { return v != ops::kIgnoreIndex; });
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
  double sum = 0.0;
  std::int64_t valid = 0;
  const float* pl = losses.data<float>();
  const std::int32_t* pt = targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < N; ++i) {
    sum += pl[i];
    valid += pt[i] != ops::kIgnoreIndex;
  }
  double all_valid = double(valid);
  if (!batch_groups_.empty()) {  // over the replica's micro-batch: add every other part's sum and count
    Tensor sums = Tensor::empty({2}, DType::f32);
    sums.data<float>()[0] = float(sum);
    sums.data<float>()[1] = float(valid);
    for (comm::Communicator* g : batch_groups_) g->all_reduce(sums)->wait();
    sum = sums.data<float>()[0];
    all_valid = sums.data<float>()[1];
  }
  Tensor loss = ctx.empty({1});
  loss.data<float>()[0] = all_valid > 0 ? float(sum / all_valid) : 0.0f;
  Tensor count = Tensor::full({1}, float(all_valid));
  ctx.saved = {logits, lse, targets, count};
  return loss;
}

Tensor CrossEntropyLoss::backward(const Tensor& dloss, Context& ctx) {
  const Tensor &logits = ctx.saved.at(0), &lse = ctx.saved.at(1), &targets = ctx.saved.at(2);
  const float valid = ctx.saved.at(3).item();
  Tensor dlogits = ctx.empty(logits.shape(), logits.dtype());
  Tensor d2 = dlogits.reshape({-1, logits.dim(-1)});
  ops::cross_entropy_backward(d2, logits.reshape({-1, logits.dim(-1)}), lse, targets,
                              valid > 0 ? dloss.item() / valid : 0.0f);
  ctx.saved.clear();
  return dlogits;
}

}  // namespace tidal::nn
