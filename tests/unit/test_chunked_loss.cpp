// The output layer and loss over blocks of positions (train.loss_chunks, nn/chunked_loss.h):
// GPT (tied head, dropout), Llama (untied head, rotary, grouped-query) and BERT (the MLM head's
// dense, GELU and LayerNorm before the decoder; padding and ignored targets) give the loss and
// every gradient of the model without blocks (within fp32 rounding: the head's weight gradient
// adds block by block), under the same parameter names; the hooks see each block's head forward
// twice and one end of its backward; the step's peak drops by most of the logits; evaluation
// gives the same loss and keeps nothing.
#include "models/bert/bert.h"
#include "models/gpt/gpt.h"
#include "models/llama/llama.h"
#include "nn/runner.h"
#include "ops/cross_entropy.h"
#include "support/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace tidal {
namespace {

constexpr std::int64_t kB = 3, kT = 7, kV = 1000;

class CountingHooks final : public nn::ModuleHooks {
 public:
  void before_forward(nn::Module& m) override { ++forwards[m.path()]; }
  void before_backward(nn::Module& m) override { ++backwards[m.path()]; }
  void after_backward(nn::Module& m) override { ++backward_ends[m.path()]; }
  std::map<std::string, int> forwards, backwards, backward_ends;
};

struct StepResult {
  float loss = 0, eval_loss = 0;
  bool logits_whole = false;
  std::map<std::string, std::vector<float>> grads;
  std::size_t activation_peak = 0;
  CountingHooks hooks;
};

std::unique_ptr<models::Model> make(const std::string& type, const nn::CheckpointPolicy& policy) {
  if (type == "gpt")
    return models::make_gpt({.n_layer = 2, .n_head = 2, .n_embd = 16, .vocab_size = kV, .seq_len = kT,
                             .dropout = 0.2f, .checkpointing = policy});
  if (type == "llama")
    return models::make_llama({.n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 16, .intermediate_size = 24,
                               .vocab_size = kV, .checkpointing = policy});
  return models::make_bert({.n_layer = 2, .n_head = 2, .n_embd = 16, .vocab_size = kV, .seq_len = kT,
                            .checkpointing = policy});
}

void run(StepResult& r, const std::string& type, const nn::CheckpointPolicy& policy) {
  auto model = make(type, policy);
  model->materialize(5);
  nn::Batch batch{.tokens = testing::randint({kB, kT}, 1, 0, int(kV)),
                  .targets = testing::randint({kB, kT}, 2, 0, int(kV))};
  if (type == "bert") {
    batch.token_types = Tensor::zeros({kB, kT}, DType::i32);
    batch.attn_mask = Tensor::empty({kB, kT}, DType::i32);
    for (std::int64_t i = 0; i < kB * kT; ++i) batch.attn_mask.data<std::int32_t>()[i] = i >= 5 && i < kT ? 0 : 1;
    for (std::int64_t i = 0; i < kB * kT; i += 2) batch.targets.data<std::int32_t>()[i] = ops::kIgnoreIndex;
  }
  HostAllocator activations;
  nn::Runner runner;
  runner.add_hooks(&r.hooks);
  nn::StepState state{.runner = &runner, .seed = 9, .step = 4, .batch = &batch, .activations = &activations};
  {
    nn::Context ctx(state);
    const models::ModelOutput out = model->run_forward(ctx);
    r.loss = out.loss;
    r.logits_whole = out.logits.defined();
    model->run_backward(ctx);
  }
  r.activation_peak = activations.peak_bytes();
  for (nn::Parameter* p : model->parameters())
    r.grads[p->name].assign(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
  nn::Runner quiet;  // the hooks count the training step alone
  nn::StepState eval = state;
  eval.runner = &quiet;
  eval.training = false;
  activations.reset_peak();
  const std::size_t before = activations.current_bytes();
  nn::Context ctx(eval);
  r.eval_loss = model->run_forward(ctx).loss;
  EXPECT_EQ(activations.current_bytes(), before) << "evaluation kept activations";
}

void expect_close(const StepResult& a, const StepResult& b) {
  EXPECT_NEAR(a.loss, b.loss, 1e-6f * std::abs(a.loss));
  EXPECT_NEAR(a.eval_loss, b.eval_loss, 1e-6f * std::abs(a.eval_loss));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (const auto& [name, g] : a.grads) {
    ASSERT_TRUE(b.grads.count(name)) << "parameter " << name << " renamed by the blocks";
    const auto& h = b.grads.at(name);
    ASSERT_EQ(g.size(), h.size()) << name;
    double largest = 0;
    for (float v : g) largest = std::max(largest, double(std::abs(v)));
    for (std::size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], h[i], 1e-5 * largest + 1e-9) << "gradient of " << name << " at " << i;
  }
}

class ChunkedLoss : public ::testing::TestWithParam<std::string> {};

TEST_P(ChunkedLoss, MatchesTheWholeLogitsAndKeepsOneBlockOfThem) {
  const std::string type = GetParam();
  const std::string head = type == "bert" ? "mlm" : "lm_head";
  StepResult whole, blocks;
  run(whole, type, {});
  run(blocks, type, {.loss_chunks = 4});  // 21 rows: blocks of 5, 5, 5 and 6
  expect_close(whole, blocks);
  EXPECT_TRUE(whole.logits_whole);
  EXPECT_FALSE(blocks.logits_whole) << "run_forward's logits are never whole under loss_chunks";
  // Four blocks in forward, each made again in backward; one end of the head's backward. (BERT's
  // decoder is a transparent child of its MLM head: the path "mlm" counts both.)
  const int uses = whole.hooks.forwards.at(head);
  EXPECT_EQ(whole.hooks.backward_ends.at(head), uses);
  EXPECT_EQ(blocks.hooks.forwards.at(head), 8 * uses);
  EXPECT_EQ(blocks.hooks.backwards.at(head), 4 * uses);
  EXPECT_EQ(blocks.hooks.backward_ends.at(head), uses) << "the hooks must see the head's backward end once";
  EXPECT_EQ(whole.hooks.forwards.at("loss"), 1);
  EXPECT_FALSE(blocks.hooks.forwards.count("loss")) << "the loss runs inside the blocks";
  // The logits [21, 1000] fp32 are what forward kept beside the activations; one block of at
  // most 6 rows is left of them.
  const std::size_t logits = kB * kT * kV * sizeof(float), block = 6 * kV * sizeof(float);
  EXPECT_LE(blocks.activation_peak + logits - block, whole.activation_peak)
      << "peak " << blocks.activation_peak << " with blocks, " << whole.activation_peak << " without";
}

TEST_P(ChunkedLoss, OneBlockPerRowAndOneBlockAreTheSameLoss) {
  StepResult one, many;
  run(one, GetParam(), {.loss_chunks = 1});
  run(many, GetParam(), {.loss_chunks = int(kB * kT)});
  expect_close(one, many);
}

INSTANTIATE_TEST_SUITE_P(Models, ChunkedLoss, ::testing::Values("gpt", "llama", "bert"));

}  // namespace
}  // namespace tidal
