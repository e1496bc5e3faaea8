// LoRA against Hugging Face PEFT (0.11.1 over transformers 4.40.2): a randomly initialised
// LlamaForCausalLM / MixtralForCausalLM / GPT2LMHeadModel saved with save_pretrained, PEFT adapters on it with A and B
// both random (so every gradient is nonzero) saved with PEFT's save_pretrained -> model.init_from
// and finetune.adapters_from: tidal's logits and loss equal PeftModel's, every adapter gradient of
// the first step equals PEFT's, the losses of 5 AdamW steps over the adapters agree, and the base
// weights come out of training bitwise as they went in (PEFT's too).
#include "config/config.h"
#include "engine/finetune.h"
#include "engine/hf_checkpoint.h"
#include "models/lora.h"
#include "nn/moe.h"
#include "nn/runner.h"
#include "optim/adamw.h"
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

constexpr std::int64_t kB = 3, kT = 29;
constexpr std::uint64_t kSeed = 7;
constexpr int kSteps = 5;
const ops::AdamWOptions kAdam{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};

struct LoraCase {
  std::string family;                  // gpt2 | llama
  std::vector<std::string> make_args;  // hf_reference.py make's sizes
  std::string targets;                 // finetune.lora_targets
  std::int64_t vocab = 0;
  int rank = 4;
  double alpha = 8;
};

void check_lora(const LoraCase& c) {
  const fs::path root = fs::temp_directory_path() / fmt::format("tidal-lora-test-{}-{}", ::getpid(), c.family);
  fs::remove_all(root);
  const fs::path hf = root / "hf", adapters = root / "adapters";
  std::vector<std::string> make{c.family, hf.string()};
  make.insert(make.end(), c.make_args.begin(), c.make_args.end());
  testing::run_hf_reference("make", make);
  testing::run_hf_reference("lora-make", {hf.string(), adapters.string(), fmt::format("r={}", c.rank),
                                          fmt::format("alpha={}", c.alpha), "targets=" + c.targets, "seed=5"});

  const config::Config cfg = config::load_config(
      "", {"model.init_from=" + hf.string(), fmt::format("model.seq_len={}", kT), "finetune.method=lora",
           fmt::format("finetune.lora_rank={}", c.rank), fmt::format("finetune.lora_alpha={}", c.alpha),
           "finetune.lora_targets=" + c.targets, "finetune.adapters_from=" + adapters.string()});
  auto model = engine::build_model(cfg, nn::single_device_layers());
  model->materialize(kSeed);
  std::vector<nn::Parameter*> base, trained;
  for (nn::Parameter* p : model->parameters()) (p->frozen ? base : trained).push_back(p);
  ASSERT_FALSE(trained.empty());
  engine::load_hf_weights(hf.string(), cfg.model, base);
  engine::load_peft_adapters(adapters.string(), cfg, trained);
  std::vector<Tensor> base_before;
  for (const nn::Parameter* p : base) {
    EXPECT_FALSE(p->grad.defined()) << p->name << ": a frozen parameter keeps no gradient";
    base_before.push_back(p->data.clone());
  }

  nn::Batch batch{.tokens = randint({kB, kT}, 300, 0, c.vocab), .targets = randint({kB, kT}, 301, 0, c.vocab)};
  batch.targets.data<std::int32_t>()[5] = -100;
  const io::Metadata meta{{"lr", fmt::format("{}", kAdam.lr)}, {"beta1", fmt::format("{}", kAdam.beta1)},
                          {"beta2", fmt::format("{}", kAdam.beta2)}, {"adam_eps", fmt::format("{}", kAdam.eps)},
                          {"weight_decay", fmt::format("{}", kAdam.weight_decay)},
                          {"steps", std::to_string(kSteps)}};
  const io::TensorMap ref = testing::run_hf_reference("lora-run", {hf.string(), adapters.string()},
                                                      {{"tokens", batch.tokens}, {"targets", batch.targets}}, meta);

  // PEFT's gradients laid out as tidal's adapters (B's query rows in tidal's head order).
  std::map<std::string, Tensor> expected_grads;
  for (const io::HfTensorSource& s :
       models::lora_hf_tensors(cfg.model, models::lora_targets(cfg.model, c.targets), c.rank)) {
    nn::Parameter p;
    p.name = s.tidal_name;
    p.shape = model->parameter(s.tidal_name).shape;
    p.data = Tensor::empty(p.shape);
    engine::copy_from_hf(p, s, {ref.at("grad:" + s.hf_names.front())});
    expected_grads[s.tidal_name] = p.data;
  }
  ASSERT_EQ(expected_grads.size(), trained.size());

  nn::Runner runner;
  nn::ExpertRecord experts;  // a mixture's router losses (nn/moe.h), told in backward
  nn::StepState state{.runner = &runner, .training = true, .seed = kSeed, .batch = &batch, .experts = &experts};
  optim::AdamW adam(trained, kAdam);
  for (int step = 0; step < kSteps; ++step) {
    state.step = std::uint32_t(step);
    nn::Context ctx(state);
    model->zero_grad();
    experts = {};
    models::ModelOutput out = model->run_forward(ctx);
    model->run_backward(ctx);
    out.loss += float(experts.loss);
    if (step == 0) {
      EXPECT_TRUE(all_close(out.logits, ref.at("logits"), kFp32)) << "logits with the adapters";
      EXPECT_TRUE(all_close(Tensor::full({1}, out.loss), ref.at("loss"), kFp32)) << "loss";
      for (const nn::Parameter* p : trained)
        EXPECT_TRUE(all_close(p->grad, expected_grads.at(p->name), kFp32)) << "gradient of " << p->name;
    }
    EXPECT_TRUE(all_close(Tensor::full({1}, out.loss), ref.at("losses").slice(0, step, step + 1).clone(), kFp32))
        << "loss of step " << step;
    adam.step();
  }
  state.step = kSteps;
  nn::Context ctx(state);
  const models::ModelOutput after = model->run_forward(ctx);
  // As in test_hf_models: after several AdamW steps fp32 rounding of gradients near zero becomes
  // whole update steps (Llama multi-head there: max |diff| 4.95e-5 on logits of ~0.02).
  EXPECT_TRUE(all_close(after.logits, ref.at("logits_after"), {1e-4, 1e-4})) << "logits after the AdamW steps";
  for (std::size_t i = 0; i < base.size(); ++i)
    EXPECT_EQ(std::memcmp(base[i]->data.raw(), base_before[i].raw(), base_before[i].nbytes()), 0)
        << base[i]->name << " changed in training";
  EXPECT_EQ(ref.at("changed").data<std::int32_t>()[0], 0) << "PEFT changed its base";
  fs::remove_all(root);
}

// Grouped-query attention (6 query heads over 2 key / value heads): q_proj's B rows reorder with
// the heads; every linear adapted, so tidal's fused qkv and gate | up take an adapter per block.
TEST(LoraOracle, LlamaEveryLinear) {
  check_lora({.family = "llama",
              .make_args = {"num_hidden_layers=2", "num_attention_heads=6", "num_key_value_heads=2", "hidden_size=96",
                            "intermediate_size=160", "vocab_size=101", "max_position_embeddings=64",
                            "rope_theta=500.0", "seed=31"},
              .targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
              .vocab = 101});
}

// PEFT's default for Llama (q_proj and v_proj: blocks 0 and 2 of the fused qkv), rank 8.
TEST(LoraOracle, LlamaQueryValue) {
  check_lora({.family = "llama",
              .make_args = {"num_hidden_layers=2", "num_attention_heads=4", "num_key_value_heads=4", "hidden_size=64",
                            "intermediate_size=96", "vocab_size=83", "max_position_embeddings=64", "seed=32"},
              .targets = "q_proj,v_proj",
              .vocab = 83,
              .rank = 8,
              .alpha = 16});
}

// Mixtral's experts (w1, w3 as tidal's fused fc, w2 as its proj) and q_proj, the router's
// load-balancing loss in the loss: every expert's adapters get their gradient through the routing.
TEST(LoraOracle, MixtralExperts) {
  check_lora({.family = "mixtral",
              .make_args = {"num_hidden_layers=2", "num_attention_heads=4", "num_key_value_heads=2", "hidden_size=64",
                            "intermediate_size=96", "vocab_size=71", "max_position_embeddings=64", "num_local_experts=4",
                            "num_experts_per_tok=2", "router_aux_loss_coef=0.02", "seed=34"},
              .targets = "q_proj,w1,w2,w3",
              .vocab = 71});
}

// GPT-2's Conv1D linears ([in, out] in the files); c_proj names both the attention's and the MLP's.
TEST(LoraOracle, Gpt2) {
  check_lora({.family = "gpt2",
              .make_args = {"n_layer=2", "n_head=3", "n_embd=48", "vocab_size=67", "n_positions=40", "seed=33"},
              .targets = "c_attn,c_proj,c_fc",
              .vocab = 67});
}

}  // namespace
}  // namespace tidal
