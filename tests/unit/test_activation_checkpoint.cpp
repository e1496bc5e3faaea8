// Activation checkpointing: the wrapper keeps parameter names, the recomputation runs through
// the Runner (hooks see each checkpointed block's forward twice, as PatrickStar needs), and the
// loss and every gradient are bitwise those of the model without checkpointing, dropout on,
// for single blocks, runs of blocks and host offload of the kept inputs.
#include "models/gpt/gpt.h"
#include "nn/runner.h"
#include "support/random.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

namespace tidal {
namespace {

class CountingHooks final : public nn::ModuleHooks {
 public:
  void before_forward(nn::Module& m) override { ++forwards[m.path()]; }
  void before_backward(nn::Module& m) override { ++backwards[m.path()]; }
  std::map<std::string, int> forwards, backwards;
};

struct StepResult {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads;
  std::size_t activation_peak = 0;
  CountingHooks hooks;
};

void run(StepResult& r, const nn::CheckpointPolicy& policy) {
  auto model = models::make_gpt(
      {.n_layer = 3, .n_head = 2, .n_embd = 16, .vocab_size = 13, .seq_len = 7, .dropout = 0.2f, .checkpointing = policy});
  model->materialize(5);
  nn::Batch batch{.tokens = testing::randint({3, 7}, 1, 0, 13), .targets = testing::randint({3, 7}, 2, 0, 13)};
  HostAllocator activations;
  nn::Runner runner;
  runner.add_hooks(&r.hooks);
  nn::StepState state{.runner = &runner, .seed = 9, .step = 4, .batch = &batch, .activations = &activations};
  {
    nn::Context ctx(state);
    r.loss = model->run_forward(ctx).loss;
    model->run_backward(ctx);
  }
  r.activation_peak = activations.peak_bytes();
  for (nn::Parameter* p : model->parameters()) {
    r.grads[p->name].assign(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
  }
}

void expect_bitwise_equal(const StepResult& a, const StepResult& b) {
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(float)), 0) << a.loss << " vs " << b.loss;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (const auto& [name, g] : a.grads) {
    ASSERT_TRUE(b.grads.count(name)) << "parameter " << name << " renamed by checkpointing";
    const auto& h = b.grads.at(name);
    ASSERT_EQ(g.size(), h.size()) << name;
    EXPECT_EQ(std::memcmp(g.data(), h.data(), g.size() * sizeof(float)), 0) << "gradient of " << name << " differs";
  }
}

TEST(ActivationCheckpoint, EveryBlockIsBitwiseTheSameAndRecomputesThroughTheRunner) {
  StepResult plain, ckpt;
  run(plain, {});
  run(ckpt, {.every = 1});
  expect_bitwise_equal(plain, ckpt);
  for (int i = 0; i < 3; ++i) {
    const std::string block = "blocks." + std::to_string(i);
    // The wrapper shares its block's path (it is transparent): the path is seen once for the
    // wrapper and twice for the block itself (forward, then the recomputation).
    EXPECT_EQ(plain.hooks.forwards.at(block), 1);
    EXPECT_EQ(ckpt.hooks.forwards.at(block), 3) << block << ": the recomputation must pass through the Runner";
    EXPECT_EQ(ckpt.hooks.forwards.at(block + ".attn.qkv"), 2);
    EXPECT_EQ(ckpt.hooks.backwards.at(block + ".attn.qkv"), 1);
  }
  EXPECT_EQ(ckpt.hooks.forwards.at("wte"), 1);  // only the blocks are checkpointed
  EXPECT_LT(ckpt.activation_peak, plain.activation_peak);
}

TEST(ActivationCheckpoint, RunsOfBlocksAndHostOffloadAreBitwiseTheSame) {
  StepResult plain, runs, offload;
  run(plain, {});
  run(runs, {.every = 2});  // runs {0, 1} and {2}
  run(offload, {.every = 1, .offload_to_host = true});
  expect_bitwise_equal(plain, runs);
  expect_bitwise_equal(plain, offload);
  EXPECT_EQ(runs.hooks.forwards.at("blocks.1.mlp.fc"), 2);
  EXPECT_EQ(runs.hooks.forwards.at("blocks.2.mlp.fc"), 2);
  // Offloading moves the kept inputs out of the activation pool.
  EXPECT_LE(offload.activation_peak, runs.activation_peak);
}

TEST(ActivationCheckpoint, SelectiveLetsGoOfQkvAndEachMlpActivationAndIsBitwiseTheSame) {
  StepResult plain, selective, both;
  run(plain, {});
  run(selective, {.selective = true});
  run(both, {.every = 1, .selective = true});  // inside a checkpointed block too
  expect_bitwise_equal(plain, selective);
  expect_bitwise_equal(plain, both);
  for (int i = 0; i < 3; ++i) {
    const std::string block = "blocks." + std::to_string(i);
    EXPECT_EQ(selective.hooks.forwards.at(block), 1);
    EXPECT_EQ(selective.hooks.forwards.at(block + ".mlp.act"), 2) << block << ": remade through the Runner";
    EXPECT_EQ(selective.hooks.forwards.at(block + ".mlp.fc"), 1);
    EXPECT_EQ(selective.hooks.forwards.at(block + ".attn.qkv"), 2) << block << ": q, k, v remade by the projection";
    EXPECT_EQ(selective.hooks.forwards.at(block + ".attn.proj"), 1);
    EXPECT_EQ(both.hooks.forwards.at(block + ".mlp.act"), 3);
  }
  // Every block's GELU output [3, 7, 64] and qkv [3, 7, 48], fp32, are gone from what forward
  // keeps; backward remakes one block's at a time.
  const std::size_t remade = 3 * 7 * (64 + 48) * sizeof(float);
  EXPECT_LE(selective.activation_peak + 2 * remade, plain.activation_peak);
}

}  // namespace
}  // namespace tidal
