// What pipeline stages are cut from (pipeline/stage_costs.h): one unit per block layer, the
// embedding joined to the first and the head and loss to the last, costed by blocks, by
// parameter elements (closed form for a GPT) or by measured time.
#include "comm/self_communicator.h"
#include "models/factory.h"
#include "pipeline/partition.h"
#include "pipeline/stage_costs.h"
#include "support/batches.h"
#include "support/models.h"
#include "support/random.h"

#include <gtest/gtest.h>

namespace tidal::pipeline {
namespace {

TEST(StageCosts, UnitsStartAtBlockLayers) {
  auto model = models::make_model(testing::tiny_gpt(4));
  const int n = int(model->layers().size());
  // embedding | blocks.0 .. blocks.3 | ln_f, head and loss
  EXPECT_EQ(model->first_block_layer(), 1);
  EXPECT_EQ(unit_bounds(*model), (std::vector<int>{0, 2, 3, 4, n}));
  EXPECT_EQ(unit_costs(*model, PartitionBy::layers), (std::vector<double>{1, 1, 1, 1}));
}

TEST(StageCosts, CheckpointedRunsAreUnits) {
  // Runs of 3 blocks (every_k): 4 blocks make two block layers, of 3 and 1 blocks.
  auto model = models::make_model(testing::tiny_gpt(4), {.every = 3});
  EXPECT_EQ(model->blocks_in_layer(), (std::vector<int>{3, 1}));
  EXPECT_EQ(unit_costs(*model, PartitionBy::layers), (std::vector<double>{3, 1}));
  EXPECT_EQ(partition(unit_costs(*model, PartitionBy::layers), 2), (std::vector<int>{0, 1, 2}));
}

TEST(StageCosts, ByParameters) {
  const config::ModelConfig c = testing::tiny_gpt(3);
  auto model = models::make_model(c);
  const double C = double(c.n_embd), V = double(c.vocab_size), T = double(c.seq_len);
  // Two LayerNorms, qkv, attention projection and the MLP (4C), with biases.
  const double block = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C);
  const double embedding = V * C + T * C, head = 2 * C + V * C;  // ln_f, then the tied table again
  EXPECT_EQ(unit_costs(*model, PartitionBy::parameters),
            (std::vector<double>{embedding + block, block, block + head}));
}

TEST(StageCosts, ByMeasuredTime) {
  auto model = models::make_model(testing::tiny_gpt(3));
  nn::Batch batch;
  batch.tokens = testing::randint({2, 8}, 5, 0, 40);
  batch.targets = testing::randint({2, 8}, 6, 0, 40);
  comm::SelfCommunicator world("world");
  const TimeProbe probe{.state = {.training = true, .seed = 3, .batch = &batch}, .world = &world};
  const std::vector<double> costs = unit_costs(*model, PartitionBy::time, &probe);
  ASSERT_EQ(costs.size(), 3u);
  for (double t : costs) EXPECT_GT(t, 0);
  // The ends hold more than a block (embedding; ln_f, head and loss).
  EXPECT_GT(costs[0], costs[1]);
  EXPECT_GT(costs[2], costs[1]);
  // The parameters borrowed for the measurement are released.
  for (nn::Parameter* p : model->parameters()) EXPECT_FALSE(p->data.defined()) << p->name;
}

}  // namespace
}  // namespace tidal::pipeline
