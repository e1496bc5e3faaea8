// GPT, BERT and ViT against PyTorch models built from the same weights (exported by tidal as
// safetensors): logits, loss, every parameter gradient, then 5 AdamW steps loss by loss. Odd
// sizes: hidden 72 with 3 heads, sequence 37, vocab 101, batch 3.
#include "models/bert/bert.h"
#include "models/gpt/gpt.h"
#include "models/vit/vit.h"
#include "nn/runner.h"
#include "optim/adamw.h"
#include "support/batches.h"
#include "support/oracle.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;
using testing::randint;

constexpr std::int64_t kB = 3, kT = 37, kC = 72, kV = 101;
constexpr int kLayers = 2, kHeads = 3, kSteps = 5;
constexpr std::uint64_t kSeed = 42;
const ops::AdamWOptions kAdam{.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};

// Runs the model in tidal and in PyTorch and compares everything. `exported` names the batch
// tensors as the reference expects them.
void expect_matches_reference(models::Model& model, const nn::Batch& batch, io::TensorMap exported,
                              io::Metadata meta, const std::string& case_name, float ln_eps) {
  model.materialize(kSeed);
  for (nn::Parameter* p : model.parameters()) exported.emplace(p->name, p->data.clone());
  meta.insert({{"n_layer", std::to_string(kLayers)}, {"n_head", std::to_string(kHeads)}, {"n_embd", std::to_string(kC)},
               {"eps", fmt::format("{}", ln_eps)}, {"lr", fmt::format("{}", kAdam.lr)},
               {"beta1", fmt::format("{}", kAdam.beta1)}, {"beta2", fmt::format("{}", kAdam.beta2)},
               {"adam_eps", fmt::format("{}", kAdam.eps)}, {"weight_decay", fmt::format("{}", kAdam.weight_decay)},
               {"steps", std::to_string(kSteps)}});
  auto ref = testing::run_oracle(case_name, exported, meta);

  nn::Runner runner;
  nn::StepState state{.runner = &runner, .training = true, .seed = kSeed, .batch = &batch};
  optim::AdamW adam(model.parameters(), kAdam);
  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    state.step = std::uint32_t(step);
    nn::Context ctx(state);
    model.zero_grad();
    models::ModelOutput out = model.run_forward(ctx);
    model.run_backward(ctx);
    if (step == 0) {
      EXPECT_TRUE(all_close(out.logits, ref.at("logits"), kFp32)) << "logits";
      EXPECT_TRUE(all_close(Tensor::full({1}, out.loss), ref.at("loss"), kFp32)) << "loss";
      int compared = 0;
      for (nn::Parameter* p : model.parameters()) {
        EXPECT_TRUE(all_close(p->grad, ref.at("grad." + p->name), kFp32)) << "grad of " << p->name;
        ++compared;
      }
      EXPECT_EQ(compared, int(std::count_if(ref.begin(), ref.end(), [](auto& kv) { return kv.first.starts_with("grad."); })));
    }
    losses.push_back(out.loss);
    adam.step();
  }
  Tensor ours = Tensor::empty({kSteps});
  std::copy(losses.begin(), losses.end(), ours.data<float>());
  EXPECT_TRUE(all_close(ours, ref.at("step_losses"), kFp32)) << "losses over " << kSteps << " AdamW steps";
  EXPECT_LT(losses.back(), losses.front()) << "training does not lower the loss";
}

TEST(ModelsOracle, Gpt2) {
  auto model = models::make_gpt({.n_layer = kLayers, .n_head = kHeads, .n_embd = kC, .vocab_size = kV, .seq_len = 41});
  nn::Batch batch{.tokens = randint({kB, kT}, 100, 0, kV), .targets = randint({kB, kT}, 101, 0, kV)};
  batch.targets.data<std::int32_t>()[5] = -100;  // an ignored position
  expect_matches_reference(*model, batch, {{"tokens", batch.tokens}, {"targets", batch.targets}}, {}, "gpt", 1e-5f);
}

// model.tie_embeddings = false: the head's own table lm_head.weight, whose gradient is the head's
// alone (and wte's the lookup's alone).
TEST(ModelsOracle, Gpt2UntiedHead) {
  auto model = models::make_gpt(
      {.n_layer = kLayers, .n_head = kHeads, .n_embd = kC, .vocab_size = kV, .seq_len = 41, .tie_embeddings = false});
  nn::Batch batch{.tokens = randint({kB, kT}, 100, 0, kV), .targets = randint({kB, kT}, 101, 0, kV)};
  expect_matches_reference(*model, batch, {{"tokens", batch.tokens}, {"targets", batch.targets}}, {}, "gpt", 1e-5f);
}

// Packed documents (Batch::positions): attention inside each document, learned positions from
// each document's start, no target across a document's end; documents of 1 to 9 tokens.
TEST(ModelsOracle, Gpt2PackedDocuments) {
  auto model = models::make_gpt({.n_layer = kLayers, .n_head = kHeads, .n_embd = kC, .vocab_size = kV, .seq_len = 41});
  nn::Batch batch{.tokens = randint({kB, kT}, 110, 0, kV), .targets = randint({kB, kT}, 111, 0, kV)};
  testing::pack_documents(batch, 9, true);
  expect_matches_reference(*model, batch,
                           {{"tokens", batch.tokens}, {"targets", batch.targets}, {"doc_positions", batch.positions}},
                           {}, "gpt", 1e-5f);
}

// A BERT batch: sample b has 6b padding tokens at the end; about a third of the real positions
// are predicted.
nn::Batch bert_batch() {
  nn::Batch batch{.tokens = randint({kB, kT}, 102, 0, kV), .token_types = randint({kB, kT}, 103, 0, 2),
                  .attn_mask = Tensor::empty({kB, kT}, DType::i32), .targets = randint({kB, kT}, 104, 0, kV)};
  Tensor pick = randint({kB, kT}, 105, 0, 3);
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t t = 0; t < kT; ++t) {
      const std::int64_t i = b * kT + t;
      const bool real = t < kT - 6 * b;
      batch.attn_mask.data<std::int32_t>()[i] = real ? 1 : 0;
      if (!real || pick.data<std::int32_t>()[i] != 0) batch.targets.data<std::int32_t>()[i] = -100;
    }
  return batch;
}

TEST(ModelsOracle, Bert) {
  auto model = models::make_bert({.n_layer = kLayers, .n_head = kHeads, .n_embd = kC, .vocab_size = kV, .seq_len = 41});
  const nn::Batch batch = bert_batch();
  expect_matches_reference(*model, batch,
                           {{"tokens", batch.tokens}, {"token_types", batch.token_types},
                            {"attn_mask", batch.attn_mask}, {"targets", batch.targets}},
                           {}, "bert", 1e-12f);
}

// Packed documents in both directions (no causal mask): each token attends its document's keys.
// Packing fills the sequences, so no padding (a document wholly of padding would attend nothing,
// which PyTorch's softmax makes NaN).
TEST(ModelsOracle, BertPackedDocuments) {
  auto model = models::make_bert({.n_layer = kLayers, .n_head = kHeads, .n_embd = kC, .vocab_size = kV, .seq_len = 41});
  nn::Batch batch = bert_batch();
  std::fill_n(batch.attn_mask.data<std::int32_t>(), batch.attn_mask.numel(), 1);
  testing::pack_documents(batch, 12, false);
  expect_matches_reference(*model, batch,
                           {{"tokens", batch.tokens}, {"token_types", batch.token_types},
                            {"attn_mask", batch.attn_mask}, {"targets", batch.targets},
                            {"doc_positions", batch.positions}},
                           {}, "bert", 1e-12f);
}

TEST(ModelsOracle, Vit) {
  // 24x24 images in 4x4 patches: 36 patches + the class token = sequence 37.
  const models::VitConfig cfg{.n_layer = kLayers, .n_head = kHeads, .n_embd = kC, .image_size = 24, .patch_size = 4,
                              .channels = 3, .num_classes = 7, .ln_eps = 1e-6f};
  auto model = models::make_vit(cfg);
  nn::Batch batch{.images = testing::randn({kB, 3, 24, 24}, 106), .targets = randint({kB}, 107, 0, 7)};
  expect_matches_reference(*model, batch, {{"images", batch.images}, {"labels", batch.targets}},
                           {{"image_size", "24"}, {"patch_size", "4"}, {"channels", "3"}, {"num_classes", "7"}}, "vit",
                           1e-6f);
}

}  // namespace
}  // namespace tidal
