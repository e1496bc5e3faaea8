// The loss layer's memory: when it holds the only reference to the logits, backward writes their
// gradient over them, so the step's peak keeps one [N, V] block where it kept two; a caller that
// keeps the logits (run_forward's ModelOutput) still reads them unchanged.
#include "nn/cross_entropy_loss.h"
#include "ops/cross_entropy.h"
#include "support/random.h"

#include <gtest/gtest.h>

namespace tidal {
namespace {

TEST(CrossEntropyLoss, WritesTheGradientOverLogitsThatNothingElseHolds) {
  const std::int64_t B = 2, T = 3, V = 1000, N = B * T;
  const Tensor given = testing::randn({B, T, V}, 1);
  nn::Batch batch{.targets = testing::randint({B, T}, 2, 0, int(V))};
  batch.targets.data<std::int32_t>()[4] = ops::kIgnoreIndex;
  // The reference gradient, out of place: mean over the 5 counted rows, dloss 0.5.
  Tensor losses = Tensor::empty({N}), lse = Tensor::empty({N}), expected = Tensor::empty({N, V});
  ops::cross_entropy_forward(losses, lse, given.reshape({N, V}), batch.targets.reshape({N}));
  ops::cross_entropy_backward(expected, given.reshape({N, V}), lse, batch.targets.reshape({N}), 0.5f / 5.0f);
  const std::size_t block = std::size_t(N * V) * sizeof(float);

  for (const bool caller_keeps_logits : {false, true}) {
    SCOPED_TRACE(caller_keeps_logits ? "the caller keeps the logits" : "the loss holds the only reference");
    HostAllocator activations;
    nn::StepState state{.batch = &batch, .activations = &activations};
    nn::Context ctx(state);
    nn::CrossEntropyLoss loss;
    Tensor logits = given.clone(activations);
    loss.forward(logits, ctx);
    const Tensor kept = caller_keeps_logits ? logits : Tensor();
    logits = Tensor();
    activations.reset_peak();
    const std::size_t before = activations.current_bytes();
    const Tensor dlogits = loss.backward(Tensor::full({1}, 0.5f), ctx);

    ASSERT_EQ(dlogits.shape(), given.shape());
    for (std::int64_t i = 0; i < N * V; ++i)
      ASSERT_EQ(dlogits.data<float>()[i], expected.data<float>()[i]) << "element " << i;
    if (caller_keeps_logits) {
      EXPECT_GE(activations.peak_bytes() - before, block);  // a block of its own for the gradient
      for (std::int64_t i = 0; i < N * V; ++i)
        ASSERT_EQ(kept.data<float>()[i], given.data<float>()[i]) << "the caller's logits changed at " << i;
    } else {
      EXPECT_LT(activations.peak_bytes() - before, block / 100);  // nothing of size [N, V] beside the logits
    }
  }
}

}  // namespace
}  // namespace tidal
