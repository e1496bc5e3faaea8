// GPT, BERT and Llama (grouped-query heads) under sequence parallelism (ring self-attention)
// against the single-process model of the same seed built on every rank: the logits (gathered along the sequence), the
// loss and every parameter gradient (summed over the ring by the trainer's gradient reducer)
// of one step agree within the fp32 tolerance, and 20 AdamW steps on fresh batches give the
// same losses. Dropout is on: each ring position draws the single process's mask for its
// positions. At 4 ranks both a ring of 4 and data 2 x a ring of 2 run; rings zig-zag (every place
// the same causal work) and contiguous, and Ulysses (an all-to-all of heads) beside the ring; one
// ring and one Ulysses layout under selective recomputation (q, k, v and the MLP's activation
// remade in backward), and rings with the output layer and loss over blocks of positions
// (train.loss_chunks: the gradient reducer must see the head's backward end once). The
// "+documents" cases pack documents into the sequences (Batch::positions): attention stays inside
// each across ring blocks and Ulysses' heads, positions restart, and the results still equal the
// single process's.
#include "config/options.h"
#include "distributed/gradient_reducer.h"
#include "models/factory.h"
#include "nn/cross_entropy_loss.h"
#include "nn/parallel_layers.h"
#include "nn/runner.h"
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

constexpr std::uint64_t kSeed = 29;
constexpr int kSteps = 20;

struct Layout {
  int data, sequence;
  bool zigzag;  // ring place r holds chunks r and 2N - 1 - r of 2N (else chunk r of N)
  parallel::SequenceMode mode = parallel::SequenceMode::ring;
  bool selective = false;  // train.activation_checkpointing = "selective"
  int loss_chunks = 1;     // train.loss_chunks
};

std::vector<Layout> layouts(int world) {
  constexpr auto ring = parallel::SequenceMode::ring, ulysses = parallel::SequenceMode::ulysses;
  switch (world) {
    case 2:
      return {{1, 2, true}, {1, 2, false}, {1, 2, true, ulysses}, {1, 2, true, ring, true}, {1, 2, true, ring, false, 3}};
    case 4:
      return {{1, 4, true},          {1, 4, false}, {2, 2, true}, {1, 4, true, ulysses}, {2, 2, false, ulysses},
              {2, 2, true, ring, true}, {1, 4, true, ulysses, true}, {2, 2, true, ring, false, 3}};
    default: return {};
  }
}

// The model type of a case: "gpt", or "gpt+documents" (packed documents).
std::string model_type(const std::string& name) { return name.substr(0, name.find('+')); }
bool packs_documents(const std::string& name) { return name.ends_with("+documents"); }

config::Config config_for(const std::string& name, const Layout& l) {
  const std::string type = model_type(name);
  config::Config cfg;
  config::ModelConfig& c = cfg.model;
  c.type = type;
  c.n_layer = 2;
  c.n_head = 4;  // Ulysses over 4 ranks: one head each
  c.n_embd = 24;
  c.vocab_size = 50;
  c.seq_len = 16;  // 8 or 4 positions per ring rank (zig-zag: two chunks of 4 or 2)
  c.dropout = 0.1f;
  // llama: its rotary embeddings turn by each position's place in the whole sequence
  if (type == "llama") {  // grouped-query heads: 8 query heads over 4 kv heads; blocks of 4 heads travel
    c.n_head = 8;
    c.family_keys = {{"n_kv_head", std::int64_t{4}}, {"intermediate_size", std::int64_t{40}}};
    c.n_embd = 32;  // rotary: an even head width
  }
  cfg.train.batch_size = 4;
  cfg.parallel.data = l.data;
  cfg.parallel.sequence = l.sequence;
  cfg.parallel.sequence_zigzag = l.zigzag;
  cfg.parallel.sequence_mode = l.mode;
  return cfg;
}

// A fresh batch per step (the same on every rank), with ignored targets and BERT padding, and
// packed documents of 1 to 7 tokens where asked.
nn::Batch make_batch(const config::Config& cfg, int step, bool documents) {
  const config::ModelConfig& c = cfg.model;
  const std::int64_t B = cfg.train.batch_size, T = c.seq_len;
  const std::uint64_t key = 2000 + std::uint64_t(step) * 10;
  nn::Batch b;
  b.tokens = testing::randint({B, T}, key, 0, std::int32_t(c.vocab_size));
  b.targets = testing::randint({B, T}, key + 1, 0, std::int32_t(c.vocab_size));
  std::int32_t* t = b.targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < B * T; i += 5 + i / T) t[i] = ops::kIgnoreIndex;  // more in later samples
  if (c.type == "bert") {
    b.token_types = testing::randint({B, T}, key + 2, 0, 2);
    b.attn_mask = Tensor::empty({B, T}, DType::i32);
    for (std::int64_t i = 0; i < B * T; ++i)  // sample s has its last 4 s positions padded (whole ring blocks too)
      b.attn_mask.data<std::int32_t>()[i] = (i % T) < T - 4 * (i / T) ? 1 : 0;
  }
  if (documents) testing::pack_documents(b, 7, c.type != "bert");
  return b;
}


struct StepResult {
  Tensor logits;
  float loss = 0;
};

StepResult forward_backward(models::Model& model, const nn::Batch& batch, int step, std::int64_t first_sample,
                            float dloss, nn::Runner& runner) {
  nn::StepState state{.runner = &runner, .training = true, .seed = kSeed, .step = std::uint32_t(step),
                      .first_sample = first_sample, .batch = &batch};
  nn::Context ctx(state);
  models::ModelOutput out = model.run_forward(ctx);
  model.run_backward(ctx, dloss);
  return {out.logits, out.loss};
}

class SequenceParallelModels : public ::testing::TestWithParam<std::string> {};

TEST_P(SequenceParallelModels, MatchSingleProcess) {
  const int world = mpi().world(comm::Seconds(60))->size();
  if (layouts(world).empty()) GTEST_SKIP() << "no sequence-parallel layout for " << world << " ranks";
  for (const Layout& l : layouts(world)) {
    SCOPED_TRACE("data " + std::to_string(l.data) + " x sequence " + std::to_string(l.sequence) +
                 (l.zigzag ? " zig-zag" : " contiguous") +
                 (l.mode == parallel::SequenceMode::ulysses ? " Ulysses" : " ring") + (l.selective ? " selective" : "") +
                 " loss_chunks " + std::to_string(l.loss_chunks));
    const config::Config cfg = config_for(GetParam(), l);
    parallel::ParallelContext pc(config::context_options(cfg), &mpi());
    const auto layers = nn::make_layers(pc);
    auto par = models::make_model(cfg.model, {.selective = l.selective, .loss_chunks = l.loss_chunks}, *layers);
    auto ref = models::make_model(cfg.model);
    par->materialize(kSeed);
    ref->materialize(kSeed);
    nn::Runner par_runner, ref_runner;
    distributed::GradientReducer reducer(*par, pc.group(parallel::GroupKind::data_sequence), 1 << 12);
    par_runner.add_hooks(&reducer);
    const ops::AdamWOptions opt{.lr = 1e-2f, .weight_decay = 0.01f};
    optim::AdamW par_adam(par->parameters(), opt), ref_adam(ref->parameters(), opt);

    const std::int64_t local = cfg.train.batch_size / l.data, first = pc.coordinates().data * local;
    for (int step = 0; step < kSteps; ++step) {
      const nn::Batch batch = make_batch(cfg, step, packs_documents(GetParam()));
      const nn::Batch mine = testing::batch_rows(batch, first, local);
      par->zero_grad();
      ref->zero_grad();
      // Each replica's loss is the mean over its valid targets: weighted by its share of the
      // batch's, the sum over replicas is the batch's mean (as the trainer does).
      const float share = float(nn::valid_targets(mine)) / float(nn::valid_targets(batch));
      reducer.set_sync(true);
      const StepResult p = forward_backward(*par, mine, step, first, share, par_runner);
      reducer.finish();
      const StepResult r = forward_backward(*ref, batch, step, 0, 1.0f, ref_runner);
      Tensor loss = Tensor::full({1}, p.loss * share);
      pc.group(parallel::GroupKind::data).all_reduce(loss)->wait();
      EXPECT_NEAR(loss.item(), r.loss, 1e-5 + 1e-4 * std::abs(r.loss)) << "step " << step;
      if (step == 0) {
        if (l.loss_chunks == 1) {  // blocks of logits are never whole
          const Tensor logits = layers->gather_features(p.logits);
          EXPECT_TRUE(all_close(logits, r.logits.slice(0, first, first + local), kFp32)) << "logits";
        }
        for (nn::Parameter* q : par->parameters())
          EXPECT_TRUE(all_close(q->grad, ref->parameter(q->name).grad, kFp32)) << "gradient of " << q->name;
      }
      par_adam.step();
      ref_adam.step();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SequenceParallelModels,
                         ::testing::Values("gpt", "bert", "llama", "gpt+documents", "bert+documents",
                                           "llama+documents"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '+', '_');
                           return name;
                         });

}  // namespace
}  // namespace tidal
