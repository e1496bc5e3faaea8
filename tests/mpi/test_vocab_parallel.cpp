// The vocab-parallel layers against their single-device counterparts on the same inputs:
// - the embedding's output (exactly: one rank contributes each row) and each rank's block of the
//   table gradient; every shard starts from its block of the single-device table;
// - the cross-entropy's loss (on every rank) and each rank's slice of dlogits, within the fp32
//   tolerance, with ignored positions, targets on every rank, and an odd number of classes per rank.
#include "nn/context.h"
#include "nn/cross_entropy_loss.h"
#include "nn/embedding.h"
#include "nn/runner.h"
#include "nn/tp/cross_entropy.h"
#include "nn/tp/embedding.h"
#include "ops/cross_entropy.h"
#include "support/mpi.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

namespace tidal::nn::tp {
namespace {

using testing::mpi;

comm::Communicator& world_group() {
  static auto world = mpi().world(comm::Seconds(60));
  return *world;
}

TEST(VocabParallelEmbedding, EqualsTheSingleDeviceEmbedding) {
  comm::Communicator& g = world_group();
  const int p = g.size(), r = g.rank();
  const std::int64_t local = 5, V = local * p, C = 6;
  const Tensor ids = testing::randint({3, 7}, 31, 0, std::int32_t(V));
  const Tensor dy = testing::randn({3, 7, C}, 32);
  Runner runner;
  StepState state{.runner = &runner};

  Embedding single(V, C, ParameterInit::normal(0.3f));
  single.assign_names("wte");
  materialize(*single.parameters()[0], 3, host_allocator());
  Context ref_ctx(state);
  const Tensor ref_y = single.forward(ids, ref_ctx);
  single.backward(dy, ref_ctx);

  VocabParallelEmbedding parallel(V, C, ParameterInit::normal(0.3f), g);
  parallel.assign_names("wte");
  materialize(parallel.table(), 3, host_allocator());
  Context ctx(state);
  const Tensor y = parallel.forward(ids, ctx);
  EXPECT_TRUE(testing::all_close(y, ref_y, {0, 0}));
  parallel.backward(dy, ctx);
  Tensor block = Tensor::empty({local, C});
  block.copy_from(single.table().grad.slice(0, r * local, (r + 1) * local));
  EXPECT_TRUE(testing::all_close(parallel.table().grad, block, {0, 0}));
}

TEST(VocabParallelCrossEntropy, EqualsTheSingleDeviceLoss) {
  comm::Communicator* world = &world_group();
  const int p = world->size(), r = world->rank();
  const std::int64_t local = 7, V = local * p;
  const Tensor logits = testing::randn({3, 5, V}, 21, 3.0f);
  Tensor targets = testing::randint({3, 5}, 22, 0, std::int32_t(V));
  targets.data<std::int32_t>()[4] = ops::kIgnoreIndex;
  targets.data<std::int32_t>()[9] = ops::kIgnoreIndex;
  Batch batch{.targets = targets};
  Runner runner;
  StepState state{.runner = &runner, .batch = &batch};
  const float dloss = 0.75f;

  CrossEntropyLoss single;
  Context ref_ctx(state);
  const float ref_loss = single.forward(logits, ref_ctx).item();
  const Tensor ref_dlogits = single.backward(Tensor::full({1}, dloss), ref_ctx);

  VocabParallelCrossEntropy parallel(V, *world);
  Context ctx(state);
  Tensor mine = Tensor::empty({3, 5, local});
  mine.copy_from(logits.slice(2, r * local, (r + 1) * local));
  const float loss = parallel.forward(mine, ctx).item();
  EXPECT_NEAR(loss, ref_loss, 1e-5 + 1e-5 * std::abs(ref_loss));
  const Tensor dlogits = parallel.backward(Tensor::full({1}, dloss), ctx);
  Tensor want = Tensor::empty({3, 5, local});
  want.copy_from(ref_dlogits.slice(2, r * local, (r + 1) * local));
  EXPECT_TRUE(testing::all_close(dlogits, want, testing::kFp32));
}

}  // namespace
}  // namespace tidal::nn::tp
