// The vocab-parallel layers against their single-device counterparts on the same inputs, for a
// vocabulary that splits over the ranks and for ones padded to split (the last rank partly
// padding; with V = 2p + 1 on 4 ranks, one rank wholly padding):
// - the embedding's output (exactly: one rank contributes each row) and each rank's block of the
//   table gradient; every shard starts from its block of the single-device table, with zero
//   padding rows; gather_parameter / shard_of give back the table and the block;
// - the cross-entropy's loss (on every rank) and each rank's slice of dlogits, within the fp32
//   tolerance, with ignored positions, targets on every rank, and an odd number of classes per
//   rank; the padding's logits (set huge) change nothing and get a zero gradient.
#include "nn/context.h"
#include "nn/cross_entropy_loss.h"
#include "nn/embedding.h"
#include "nn/runner.h"
#include "nn/tp/cross_entropy.h"
#include "nn/tp/embedding.h"
#include "nn/tp/shard.h"
#include "ops/cross_entropy.h"
#include "support/mpi.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tidal::nn::tp {
namespace {

using testing::mpi;

comm::Communicator& world_group() {
  static auto world = mpi().world(comm::Seconds(60));
  return *world;
}

// Vocabularies for p ranks: one that splits, one padded by a row, and 2p + 1 (blocks of 3, the
// last rank's wholly padding when p = 4).
std::vector<std::int64_t> vocabularies(std::int64_t per_rank, int p) {
  return {per_rank * p, per_rank * p - 1, 2 * std::int64_t(p) + 1};
}

TEST(VocabParallelEmbedding, EqualsTheSingleDeviceEmbedding) {
  comm::Communicator& g = world_group();
  const int p = g.size(), r = g.rank();
  const std::int64_t C = 6;
  for (const std::int64_t V : vocabularies(5, p)) {
    SCOPED_TRACE("vocabulary " + std::to_string(V));
    const std::int64_t local = padded_vocab(V, p) / p, first = r * local;
    const std::int64_t inside = std::clamp<std::int64_t>(V - first, 0, local);
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
    Parameter& table = parallel.table();
    materialize(table, 3, host_allocator());
    ASSERT_EQ(table.shape, Shape({local, C}));
    EXPECT_EQ(rows_inside(table), inside);
    Tensor want = Tensor::zeros({local, C});  // this rank's rows of the table, zeros past V
    want.slice(0, 0, inside).copy_from(single.table().data.slice(0, first, first + inside));
    EXPECT_TRUE(testing::all_close(table.data, want, {0, 0})) << "initial block";
    EXPECT_TRUE(testing::all_close(gather_parameter(table, table.data, g), single.table().data, {0, 0}));
    EXPECT_TRUE(testing::all_close(shard_of(table, single.table().data), want, {0, 0}));

    Context ctx(state);
    const Tensor y = parallel.forward(ids, ctx);
    EXPECT_TRUE(testing::all_close(y, ref_y, {0, 0}));
    parallel.backward(dy, ctx);
    want.zero_();
    want.slice(0, 0, inside).copy_from(single.table().grad.slice(0, first, first + inside));
    EXPECT_TRUE(testing::all_close(table.grad, want, {0, 0})) << "gradient block";
  }
}

TEST(VocabParallelCrossEntropy, EqualsTheSingleDeviceLoss) {
  comm::Communicator* world = &world_group();
  const int p = world->size(), r = world->rank();
  for (const std::int64_t V : vocabularies(7, p)) {
    SCOPED_TRACE("vocabulary " + std::to_string(V));
    const std::int64_t local = padded_vocab(V, p) / p, first = r * local;
    const std::int64_t inside = std::clamp<std::int64_t>(V - first, 0, local);
    const Tensor logits = testing::randn({3, 5, V}, 21, 3.0f);
    Tensor targets = testing::randint({3, 5}, 22, 0, std::int32_t(V));
    targets.data<std::int32_t>()[4] = ops::kIgnoreIndex;
    targets.data<std::int32_t>()[9] = ops::kIgnoreIndex;
    targets.data<std::int32_t>()[11] = std::int32_t(V - 1);  // a target beside the padding
    Batch batch{.targets = targets};
    Runner runner;
    StepState state{.runner = &runner, .batch = &batch};
    const float dloss = 0.75f;

    CrossEntropyLoss single;
    Context ref_ctx(state);
    const float ref_loss = single.forward(logits, ref_ctx).item();
    const Tensor ref_dlogits = single.backward(Tensor::full({1}, dloss), ref_ctx);

    VocabParallelCrossEntropy parallel(V, padded_vocab(V, p), *world);
    Context ctx(state);
    Tensor mine = Tensor::full({3, 5, local}, 1e4f);  // padding logits that would dominate the sum
    mine.slice(2, 0, inside).copy_from(logits.slice(2, first, first + inside));
    const float loss = parallel.forward(mine, ctx).item();
    EXPECT_NEAR(loss, ref_loss, 1e-5 + 1e-5 * std::abs(ref_loss));
    const Tensor dlogits = parallel.backward(Tensor::full({1}, dloss), ctx);
    Tensor want = Tensor::zeros({3, 5, local});
    want.slice(2, 0, inside).copy_from(ref_dlogits.slice(2, first, first + inside));
    EXPECT_TRUE(testing::all_close(dlogits, want, testing::kFp32));
  }
}

}  // namespace
}  // namespace tidal::nn::tp
