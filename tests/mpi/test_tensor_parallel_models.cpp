// GPT (its vocabulary padded to split), BERT, ViT and Llama under every tensor-parallel mode that fits
// the launched world, against the single-device model of the same seed built on every rank: the
// logits (gathered), the loss and every parameter gradient (gathered) of one step agree within
// the fp32 tolerance, and 20 AdamW steps on fresh batches give the same losses. 1D and 2D also run
// under selective recomputation (q, k, v and the MLP's activation remade in backward: 2D's qkv
// projection communicates again), and with the output layer and vocab-parallel loss over blocks
// of positions (train.loss_chunks: the head's and the loss's collectives run block by block). The
// "+documents" cases pack documents into the sequences (Batch::positions): the attention of each
// rank's heads stays inside them and positions restart (2D, 2.5D and 3D: on each rank's samples).
#include "config/options.h"
#include "models/factory.h"
#include "models/registry.h"
#include "nn/runner.h"
#include "nn/parallel_layers.h"
#include "nn/tp/shard.h"
#include "ops/cross_entropy.h"
#include "optim/adamw.h"
#include "parallel/context.h"
#include "support/batches.h"
#include "support/mpi.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;
using testing::mpi;

constexpr std::uint64_t kSeed = 23;
constexpr int kSteps = 20;

struct Mode {
  const char* mode;
  int depth = 1;
  bool selective = false;  // train.activation_checkpointing = "selective"
  int loss_chunks = 1;     // train.loss_chunks (ViT keeps its one row per image)
};

// The modes that fill the launched world with one tensor group.
std::vector<Mode> modes(int world) {
  switch (world) {
    case 2: return {{"1d"}, {"1d", 1, true}, {"1d", 1, false, 3}};
    case 4: return {{"1d"}, {"2d"}, {"2.5d", 1}, {"2d", 1, true}, {"2d", 1, false, 3}};
    case 8: return {{"2.5d", 2}, {"3d"}};
    case 9: return {{"2d"}};
    default: return {};
  }
}

// The model type of a case: "gpt", or "gpt+documents" (packed documents).
std::string model_type(const std::string& name) { return name.substr(0, name.find('+')); }
bool packs_documents(const std::string& name) { return name.ends_with("+documents"); }

config::Config config_for(const std::string& name, const Mode& m, int world) {
  const std::string type = model_type(name);
  config::Config cfg;
  config::ModelConfig& c = cfg.model;
  c.type = type;
  c.n_layer = 2;
  // Heads, width, classes and batch divisible by every split of the world; BERT's vocabulary too,
  // GPT's a prime that every split pads (nn/tp/embedding.h).
  const bool three = world % 3 == 0;
  c.n_head = three ? 3 : 4;
  c.n_embd = three ? 18 : 32;
  c.vocab_size = type == "gpt" ? 61 : three ? 63 : 64;
  if (type == "llama") {  // grouped-query heads (2 per kv head), even head sizes for the rotations
    c.n_head = three ? 6 : 8;
    c.family_keys = {{"n_kv_head", std::int64_t{c.n_head / 2}}, {"intermediate_size", std::int64_t{48}}};
    c.n_embd = three ? 36 : 32;
  }
  c.seq_len = 8;
  if (type == "vit")  // 48 patch features
    c.family_keys = {{"num_classes", std::int64_t{three ? 9 : 8}}, {"image_size", std::int64_t{8}},
                     {"patch_size", std::int64_t{4}}, {"channels", std::int64_t{3}}};
  cfg.train.batch_size = three ? 6 : 8;
  cfg.parallel.tensor.size = world;
  cfg.parallel.tensor.mode = config::parse_choice<parallel::TensorMode>(m.mode).value();
  cfg.parallel.tensor.depth = m.depth;
  return cfg;
}

// A fresh batch per step (the same on every rank), with ignored targets and BERT padding, and
// packed documents of 1 to 5 tokens where asked.
nn::Batch make_batch(const config::Config& cfg, int step, bool documents) {
  const config::ModelConfig& c = cfg.model;
  const std::int64_t B = cfg.train.batch_size, T = c.seq_len;
  const std::uint64_t key = 1000 + std::uint64_t(step) * 10;
  nn::Batch b;
  if (c.type == "vit") {
    const models::ModelTraits image = models::model_traits(c);
    b.images = testing::randn({B, image.channels, image.image_size, image.image_size}, key);
    b.targets = testing::randint({B}, key + 1, 0, std::int32_t(image.classes));
    return b;
  }
  b.tokens = testing::randint({B, T}, key, 0, std::int32_t(c.vocab_size));
  b.targets = testing::randint({B, T}, key + 1, 0, std::int32_t(c.vocab_size));
  std::int32_t* t = b.targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < B * T; i += 5) t[i] = ops::kIgnoreIndex;
  if (c.type == "bert") {
    b.token_types = testing::randint({B, T}, key + 2, 0, 2);
    b.attn_mask = Tensor::empty({B, T}, DType::i32);
    for (std::int64_t i = 0; i < B * T; ++i)  // sample s has its last s % 3 positions padded
      b.attn_mask.data<std::int32_t>()[i] = (i % T) < T - (i / T) % 3 ? 1 : 0;
  }
  if (documents) testing::pack_documents(b, 5, c.type != "bert");
  return b;
}

struct StepResult {
  Tensor logits;
  float loss = 0;
};

StepResult forward_backward(models::Model& model, const nn::Batch& batch, int step) {
  nn::Runner runner;
  nn::StepState state{.runner = &runner, .training = true, .seed = kSeed, .step = std::uint32_t(step),
                      .batch = &batch};
  nn::Context ctx(state);
  models::ModelOutput out = model.run_forward(ctx);
  model.run_backward(ctx);
  return {out.logits, out.loss};
}

class TensorParallelModels : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelModels, MatchSingleDevice) {
  const int world = mpi().world(comm::Seconds(60))->size();
  if (modes(world).empty()) GTEST_SKIP() << "no tensor-parallel mode fills " << world << " ranks";
  for (const Mode& m : modes(world)) {
    SCOPED_TRACE(std::string(m.mode) + " depth " + std::to_string(m.depth) + (m.selective ? " selective" : "") +
                 " loss_chunks " + std::to_string(m.loss_chunks));
    const config::Config cfg = config_for(GetParam(), m, world);
    parallel::ParallelContext pc(config::context_options(cfg), &mpi());
    comm::Communicator& tensor = pc.group(parallel::GroupKind::tensor);
    const auto layers = nn::make_layers(pc);
    auto par = models::make_model(cfg.model, {.selective = m.selective, .loss_chunks = m.loss_chunks}, *layers);
    auto ref = models::make_model(cfg.model);
    par->materialize(kSeed);
    ref->materialize(kSeed);
    const ops::AdamWOptions opt{.lr = 1e-3f, .weight_decay = 0.01f};
    optim::AdamW par_adam(par->parameters(), opt), ref_adam(ref->parameters(), opt);
    EXPECT_EQ(par->num_parameters(), ref->num_parameters());

    for (int step = 0; step < kSteps; ++step) {
      const nn::Batch batch = make_batch(cfg, step, packs_documents(GetParam()));
      par->zero_grad();
      ref->zero_grad();
      const StepResult p = forward_backward(*par, batch, step);
      const StepResult r = forward_backward(*ref, batch, step);
      nn::tp::reduce_replicated_gradients(par->parameters());
      EXPECT_NEAR(p.loss, r.loss, 1e-5 + 1e-4 * std::abs(r.loss)) << "step " << step;
      if (step == 0) {
        // Gathered, the padding's logits follow the vocabulary's (blocks of logits are never whole).
        if (m.loss_chunks == 1 || GetParam() == "vit") {
          const Tensor logits = layers->gather_features(p.logits);
          EXPECT_TRUE(all_close(logits.slice(-1, 0, r.logits.dim(-1)).clone(), r.logits, kFp32)) << "logits";
        } else {
          EXPECT_FALSE(p.logits.defined());
        }
        for (nn::Parameter* q : par->parameters()) {
          const Tensor grad = nn::tp::gather_parameter(*q, q->grad, tensor);
          EXPECT_TRUE(all_close(grad, ref->parameter(q->name).grad, kFp32)) << "gradient of " << q->name;
          const Tensor data = nn::tp::gather_parameter(*q, q->data, tensor);
          EXPECT_TRUE(all_close(data, ref->parameter(q->name).data, {0, 0})) << "initial value of " << q->name;
        }
      }
      par_adam.step();
      ref_adam.step();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelModels,
                         ::testing::Values("gpt", "bert", "vit", "llama", "gpt+documents", "llama+documents"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '+', '_');
                           return name;
                         });

}  // namespace
}  // namespace tidal
