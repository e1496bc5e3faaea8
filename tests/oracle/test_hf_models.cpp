// Hugging Face weights in and out, against transformers' own classes (4.40.2): a randomly
// initialised GPT2LMHeadModel / BertForMaskedLM / ViTForImageClassification / LlamaForCausalLM
// saved with save_pretrained at odd sizes -> model.init_from -> tidal's logits and loss equal
// HF's on the same batch, and again after AdamW steps on each side (Llama: every gradient of the
// first step, and the losses of 5 steps); the weights loaded and exported again are bitwise the
// files' (HF -> tidal -> HF); a tidal-trained checkpoint exported and opened with
// from_pretrained gives tidal's logits.
#include "config/config.h"
#include "config/hf_model.h"
#include "engine/checkpoint/checkpointer.h"
#include "engine/hf_checkpoint.h"
#include "io/hf_weights.h"
#include "models/factory.h"
#include "nn/moe.h"
#include "nn/runner.h"
#include "optim/adamw.h"
#include "support/batches.h"
#include "support/oracle.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

namespace tidal {
namespace {

namespace fs = std::filesystem;
using testing::all_close;
using testing::kFp32;
using testing::randint;

constexpr std::int64_t kB = 3, kT = 37;
constexpr std::uint64_t kSeed = 7;
const ops::AdamWOptions kAdam{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / fmt::format("tidal-hf-test-{}-{}", ::getpid(), name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Every tensor of `a` (but transformers' buffers) is in `b` with the same dtype, shape and bytes.
void expect_bitwise_equal(const std::string& a, const std::string& b) {
  const io::HfWeightFiles fa(a), fb(b);
  int compared = 0;
  for (const auto& [name, at] : fa.tensors()) {
    if (name.ends_with(".attn.bias") || name.ends_with("position_ids")) continue;
    ASSERT_TRUE(fb.tensors().count(name)) << name << " missing from the export";
    const Tensor x = fa.view(name), y = fb.view(name);
    ASSERT_EQ(x.shape(), y.shape()) << name;
    ASSERT_EQ(x.dtype(), y.dtype()) << name;
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.nbytes()), 0) << name << " differs";
    ++compared;
  }
  EXPECT_EQ(compared, int(fb.tensors().size())) << "the export has tensors the original has not";
}

struct Case {
  std::string family;                 // gpt2 | bert | vit
  std::vector<std::string> make_args;  // hf_reference.py make's sizes
  nn::Batch batch;
  io::TensorMap exported;  // the batch as hf_reference.py run reads it
  std::uint64_t export_shard_bytes = std::uint64_t(2) << 30;
  int steps = 1;           // AdamW steps on the batch, each loss compared
  bool gradients = false;  // compare every parameter's gradient of the first step
};

// Every parameter's gradient against HF's of the same step, mapped to tidal's layout the way
// init_from maps weights (hf_reference.py saved them as a model directory).
void expect_gradients_equal(models::Model& model, const config::Config& cfg, const fs::path& grads_dir) {
  auto expected = models::make_model(cfg.model, {});
  expected->materialize(kSeed);
  engine::load_hf_weights(grads_dir.string(), cfg.model, expected->parameters());
  for (nn::Parameter* p : model.parameters())
    EXPECT_TRUE(all_close(p->grad, expected->parameter(p->name).data, kFp32)) << "gradient of " << p->name;
}

void check_case(const Case& c) {
  const fs::path root = scratch(c.family), hf = root / "hf", ckpt = root / "ckpt", back = root / "back",
                 trained = root / "trained";
  testing::run_hf_reference("make", [&] {
    std::vector<std::string> a{c.family, hf.string()};
    a.insert(a.end(), c.make_args.begin(), c.make_args.end());
    return a;
  }());
  const config::Config cfg = config::load_config(
      "", {"model.init_from=" + hf.string(), c.family == "vit" ? "data.kind=images" : "model.seq_len=37"});
  auto model = models::make_model(cfg.model, {});
  model->materialize(kSeed);
  const engine::HfLoadReport report = engine::load_hf_weights(hf.string(), cfg.model, model->parameters());
  EXPECT_EQ(report.tensors, std::int64_t(model->parameters().size()));

  // HF -> tidal -> HF is bitwise.
  std::vector<std::pair<std::string, Tensor>> weights;
  for (nn::Parameter* p : model->parameters()) weights.emplace_back(p->name, p->data.clone());
  const std::string toml = config::to_toml(cfg);
  engine::write_checkpoint(ckpt.string(), {.step = 0, .config_toml = toml}, weights, 1);
  engine::export_hf(ckpt.string(), back.string(), c.export_shard_bytes);
  expect_bitwise_equal(hf.string(), back.string());

  const fs::path grads = root / "grads";
  io::Metadata meta{{"lr", fmt::format("{}", kAdam.lr)}, {"beta1", fmt::format("{}", kAdam.beta1)},
                    {"beta2", fmt::format("{}", kAdam.beta2)}, {"adam_eps", fmt::format("{}", kAdam.eps)},
                    {"weight_decay", fmt::format("{}", kAdam.weight_decay)}, {"steps", std::to_string(c.steps)}};
  if (c.gradients) meta.emplace("grads_dir", grads.string());
  const io::TensorMap ref = testing::run_hf_reference("run", {hf.string()}, c.exported, meta);
  ASSERT_EQ(ref.at("losses").numel(), c.steps);

  nn::Runner runner;
  nn::ExpertRecord experts;  // a mixture of experts' router losses (nn/moe.h), told in backward
  nn::StepState state{.runner = &runner, .training = true, .seed = kSeed, .batch = &c.batch, .experts = &experts};
  optim::AdamW adam(model->parameters(), kAdam);
  for (int step = 0; step < c.steps; ++step) {
    state.step = std::uint32_t(step);
    nn::Context ctx(state);
    model->zero_grad();
    experts = {};
    const models::ModelOutput out = model->run_forward(ctx);
    model->run_backward(ctx);
    const float loss = out.loss + float(experts.loss);
    if (step == 0) {
      EXPECT_TRUE(all_close(out.logits, ref.at("logits"), kFp32)) << "logits";
      EXPECT_TRUE(all_close(Tensor::full({1}, loss), ref.at("loss"), kFp32)) << "loss";
      if (c.gradients) expect_gradients_equal(*model, cfg, grads);
    }
    EXPECT_TRUE(all_close(Tensor::full({1}, loss), ref.at("losses").slice(0, step, step + 1).clone(), kFp32))
        << "loss of step " << step;
    adam.step();
  }
  state.step = std::uint32_t(c.steps);
  nn::Context ctx(state);
  experts = {};
  models::ModelOutput after = model->run_forward(ctx);
  const Tensor after_logits = after.logits.clone();  // the step's activation memory is reused below
  model->run_backward(ctx);  // the routers tell their losses in backward
  after.loss += float(experts.loss);
  // After several steps AdamW's m / sqrt(v) turns fp32 rounding differences of gradients near zero
  // into whole update steps; Llama multi-head after 5 steps measured max |diff| 4.95e-5 on logits
  // of ~0.02 (the losses of every step agree within kFp32 above).
  const testing::Tolerance after_steps = c.steps > 1 ? testing::Tolerance{1e-4, 1e-4} : kFp32;
  EXPECT_TRUE(all_close(after_logits, ref.at("logits_after"), after_steps)) << "logits after the AdamW steps";
  EXPECT_TRUE(all_close(Tensor::full({1}, after.loss), ref.at("loss_after"), after_steps))
      << "loss after the AdamW steps";

  // The trained weights exported and opened by from_pretrained give tidal's logits.
  std::vector<std::pair<std::string, Tensor>> stepped;
  for (nn::Parameter* p : model->parameters()) stepped.emplace_back(p->name, p->data.clone());
  engine::write_checkpoint(ckpt.string(), {.step = c.steps, .config_toml = toml}, stepped, 1);
  const engine::HfExportReport exported = engine::export_hf(ckpt.string(), trained.string(), c.export_shard_bytes);
  if (c.export_shard_bytes < (std::uint64_t(1) << 20)) {
    EXPECT_GT(exported.files, 1) << "a small shard size writes shards and an index";
    EXPECT_TRUE(fs::exists(trained / "model.safetensors.index.json"));
  }
  const io::TensorMap theirs = testing::run_hf_reference("run", {trained.string()}, c.exported);
  EXPECT_TRUE(all_close(after_logits, theirs.at("logits"), kFp32)) << "from_pretrained of the export";
  fs::remove_all(root);
}

TEST(HfModels, Gpt2) {
  Case c;
  c.family = "gpt2";
  c.make_args = {"n_layer=2", "n_head=3", "n_embd=72", "vocab_size=101", "n_positions=41", "seed=11"};
  c.batch = {.tokens = randint({kB, kT}, 200, 0, 101), .targets = randint({kB, kT}, 201, 0, 101)};
  c.batch.targets.data<std::int32_t>()[4] = -100;
  c.exported = {{"tokens", c.batch.tokens}, {"targets", c.batch.targets}};
  check_case(c);
}

// Untied head (lm_head.weight of its own), weights in shards with an index, exported in shards.
TEST(HfModels, Gpt2UntiedSharded) {
  Case c;
  c.family = "gpt2";
  c.make_args = {"n_layer=3", "n_head=3", "n_embd=48", "vocab_size=67", "n_positions=40", "tie_word_embeddings=false",
                 "max_shard_size=60KB", "seed=12"};
  c.export_shard_bytes = 64 << 10;
  c.batch = {.tokens = randint({kB, kT}, 202, 0, 67), .targets = randint({kB, kT}, 203, 0, 67)};
  c.exported = {{"tokens", c.batch.tokens}, {"targets", c.batch.targets}};
  check_case(c);
}

TEST(HfModels, Bert) {
  Case c;
  c.family = "bert";
  c.make_args = {"num_hidden_layers=2", "num_attention_heads=3", "hidden_size=72", "intermediate_size=288",
                 "vocab_size=101", "max_position_embeddings=45", "type_vocab_size=3", "seed=13"};
  c.batch = {.tokens = randint({kB, kT}, 204, 0, 101), .token_types = randint({kB, kT}, 205, 0, 3),
             .attn_mask = Tensor::empty({kB, kT}, DType::i32), .targets = randint({kB, kT}, 206, 0, 101)};
  Tensor pick = randint({kB, kT}, 207, 0, 3);
  for (std::int64_t i = 0; i < kB * kT; ++i) {
    const bool real = i % kT < kT - 5 * (i / kT);  // sample b ends in 5b padding positions
    c.batch.attn_mask.data<std::int32_t>()[i] = real ? 1 : 0;
    if (!real || pick.data<std::int32_t>()[i] != 0) c.batch.targets.data<std::int32_t>()[i] = -100;
  }
  c.exported = {{"tokens", c.batch.tokens}, {"token_types", c.batch.token_types}, {"attn_mask", c.batch.attn_mask},
                {"targets", c.batch.targets}};
  check_case(c);
}

TEST(HfModels, Vit) {
  // 20x20 images in 4x4 patches: 25 patches + the class token.
  Case c;
  c.family = "vit";
  c.make_args = {"num_hidden_layers=2", "num_attention_heads=3", "hidden_size=72", "intermediate_size=288",
                 "image_size=20", "patch_size=4", "num_channels=3", "num_labels=7", "seed=14"};
  c.batch = {.images = testing::randn({kB, 3, 20, 20}, 208), .targets = randint({kB}, 209, 0, 7)};
  c.exported = {{"images", c.batch.images}, {"labels", c.batch.targets}};
  check_case(c);
}

// Llama at odd sizes (width 96, 6 heads, head size 16, SwiGLU width 160, vocabulary 101) with
// n_kv_head = 2 (groups of 3 query heads), 1 (multi-query) and 6 (multi-head).
Case llama_case(int n_kv_head, std::uint64_t seed) {
  Case c;
  c.family = "llama";
  c.make_args = {"num_hidden_layers=2", "num_attention_heads=6", fmt::format("num_key_value_heads={}", n_kv_head),
                 "hidden_size=96", "intermediate_size=160", "vocab_size=101", "max_position_embeddings=64",
                 "rope_theta=500.0", fmt::format("seed={}", seed)};
  c.batch = {.tokens = randint({kB, kT}, 210 + seed, 0, 101), .targets = randint({kB, kT}, 220 + seed, 0, 101)};
  c.batch.targets.data<std::int32_t>()[7] = -100;
  c.exported = {{"tokens", c.batch.tokens}, {"targets", c.batch.targets}};
  c.steps = n_kv_head == 2 ? 10 : 5;  // 10 then export: the fine-tuning round trip
  c.gradients = true;
  return c;
}

// Packed documents (Batch::positions) against transformers' Llama given the block-diagonal causal
// mask and the restarted positions (position_ids): logits, loss, every gradient of the first step
// and the losses of 5 AdamW steps. Documents of 1 to 12 tokens; sample 0 starts inside one.
TEST(HfModels, LlamaPackedDocuments) {
  Case c = llama_case(2, 18);
  testing::pack_documents(c.batch, 12, true);
  c.exported = {{"tokens", c.batch.tokens}, {"targets", c.batch.targets}, {"doc_positions", c.batch.positions}};
  c.steps = 5;
  check_case(c);
}

TEST(HfModels, LlamaGroupedQuery) { check_case(llama_case(2, 15)); }

// Qwen2 (Qwen2ForCausalLM: Llama's shape with biases on q, k and v, none on the output) at the
// Llama cases' odd sizes, 6 query heads over 2 key / value heads: logits, loss and every gradient
// of the first step, 5 AdamW steps, and the export opened by from_pretrained.
TEST(HfModels, Qwen2) {
  Case c = llama_case(2, 19);
  c.family = "qwen2";
  c.steps = 5;
  check_case(c);
}
// Mixtral (MixtralForCausalLM) at the Llama cases' odd sizes: 4 experts of SwiGLU width 160, 2 a
// token, renormalized, a load-balancing loss of coefficient 0.02 in the loss; 2 layers (the
// loss's router part is the mean of each layer's load_balancing_loss_func). Logits, the loss,
// every gradient of the first step (router and experts included), 5 AdamW steps, the export.
TEST(HfModels, Mixtral) {
  Case c = llama_case(2, 21);
  c.family = "mixtral";
  c.make_args.insert(c.make_args.end(), {"num_local_experts=4", "num_experts_per_tok=2", "router_aux_loss_coef=0.02"});
  c.steps = 5;
  check_case(c);
}

// Qwen2-MoE (Qwen2MoeForCausalLM): 6 experts of width 64, 3 a token, weights not renormalized, a
// shared expert of width 80 behind its sigmoid gate, q, k and v biases; one layer, so the loss is
// compared with the model's own aux_loss. Then two layers with norm_topk_prob.
TEST(HfModels, Qwen2Moe) {
  Case c = llama_case(2, 22);
  c.family = "qwen2_moe";
  c.make_args[0] = "num_hidden_layers=1";
  c.make_args.insert(c.make_args.end(), {"num_experts=6", "num_experts_per_tok=3", "moe_intermediate_size=64",
                                         "shared_expert_intermediate_size=80", "router_aux_loss_coef=0.02"});
  c.steps = 5;
  check_case(c);
}
TEST(HfModels, Qwen2MoeRenormalized) {
  Case c = llama_case(2, 23);
  c.family = "qwen2_moe";
  c.make_args.insert(c.make_args.end(), {"num_experts=4", "num_experts_per_tok=2", "moe_intermediate_size=48",
                                         "shared_expert_intermediate_size=64", "norm_topk_prob=true",
                                         "router_aux_loss_coef=0.05"});
  c.steps = 5;
  check_case(c);
}
TEST(HfModels, LlamaMultiQuery) { check_case(llama_case(1, 16)); }
TEST(HfModels, LlamaMultiHead) { check_case(llama_case(6, 17)); }

}  // namespace
}  // namespace tidal
