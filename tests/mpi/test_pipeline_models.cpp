// GPT, BERT and Llama through pipeline stages against the single-process model of the same seed built
// on every rank: with each schedule (GPipe, 1F1B, interleaved with 2 virtual stages) at the
// launched pipeline size, 20 AdamW steps of 8 micro-batches with dropout give the single
// process's losses (whole batch, one micro-batch) within the fp32 tolerance, and after the
// first step every gradient a stage holds, including the tied embedding summed over both end
// stages, equals the single process's.
#include "config/options.h"
#include "models/factory.h"
#include "nn/cross_entropy_loss.h"
#include "nn/runner.h"
#include "ops/cross_entropy.h"
#include "optim/adamw.h"
#include "parallel/context.h"
#include "pipeline/engine.h"
#include "support/batches.h"
#include "support/mpi.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;
using testing::mpi;

constexpr std::uint64_t kSeed = 31;
constexpr int kSteps = 20, kMicro = 8;

struct Case {
  const char* schedule;
  int chunks;
};

config::Config config_for(const std::string& type, int stages, int chunks) {
  config::Config cfg;
  config::ModelConfig& c = cfg.model;
  c.type = type;
  c.n_layer = 2 * stages * chunks;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 40;
  c.seq_len = 8;
  c.dropout = 0.1f;
  if (type == "llama") c.family_keys = {{"intermediate_size", std::int64_t{24}}, {"n_kv_head", std::int64_t{1}}};  // multi-query
  cfg.train.batch_size = 2 * kMicro;
  cfg.parallel.pipeline = stages;
  return cfg;
}

nn::Batch make_batch(const config::Config& cfg, int step) {
  const config::ModelConfig& c = cfg.model;
  const std::int64_t B = cfg.train.batch_size, T = c.seq_len;
  const std::uint64_t key = 3000 + std::uint64_t(step) * 10;
  nn::Batch b;
  b.tokens = testing::randint({B, T}, key, 0, std::int32_t(c.vocab_size));
  b.targets = testing::randint({B, T}, key + 1, 0, std::int32_t(c.vocab_size));
  std::int32_t* t = b.targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < B * T; i += 3 + i / T) t[i] = ops::kIgnoreIndex;
  if (c.type == "bert") {
    b.token_types = testing::randint({B, T}, key + 2, 0, 2);
    b.attn_mask = Tensor::empty({B, T}, DType::i32);
    for (std::int64_t i = 0; i < B * T; ++i) b.attn_mask.data<std::int32_t>()[i] = (i % T) < T - (i / T) % 3 ? 1 : 0;
  }
  return b;
}


class PipelineModels : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineModels, MatchSingleProcess) {
  const int stages = mpi().world(comm::Seconds(60))->size();
  for (const Case& k : {Case{"gpipe", 1}, Case{"1f1b", 1}, Case{"interleaved", 2}}) {
    SCOPED_TRACE(std::string(k.schedule) + " with " + std::to_string(k.chunks) + " chunks");
    const config::Config cfg = config_for(GetParam(), stages, k.chunks);
    parallel::ParallelContext pc(config::context_options(cfg), &mpi());
    auto par = models::make_model(cfg.model);
    auto ref = models::make_model(cfg.model);
    pipeline::PipelineOptions options;
    options.schedule = config::parse_choice<pipeline::ScheduleKind>(k.schedule).value();
    options.chunks = k.chunks;
    pipeline::PipelineEngine engine(*par, pc, options);
    engine.materialize(kSeed);
    ref->materialize(kSeed);
    // At lr 1e-2 the 16-layer post-LN BERT of the interleaved case amplifies fp32 summation-order
    // differences chaotically (measured: 3.9e-7 relative at step 15, 1.7e-5 at 16, 2.1e-3 at 17, while
    // GPT stays below 2e-7): 1e-3, as in the tensor-parallel test, keeps the comparison meaningful.
    const ops::AdamWOptions opt{.lr = 1e-3f, .weight_decay = 0.01f};
    optim::AdamW par_adam(engine.parameters(), opt), ref_adam(ref->parameters(), opt);
    nn::Runner runner;
    const std::int64_t micro = cfg.train.batch_size / kMicro;
    for (int step = 0; step < kSteps; ++step) {
      const nn::Batch batch = make_batch(cfg, step);
      const double all = double(nn::valid_targets(batch));
      std::vector<nn::Batch> parts;
      std::vector<pipeline::MicroBatch> micro_batches;
      for (int m = 0; m < kMicro; ++m) parts.push_back(testing::batch_rows(batch, m * micro, micro));
      for (const nn::Batch& part : parts)
        micro_batches.push_back({&part, std::int64_t(micro_batches.size()) * micro,
                                 float(double(nn::valid_targets(part)) / all)});
      engine.zero_grad();
      ref->zero_grad();
      const nn::StepState state{.runner = &runner, .training = true, .seed = kSeed, .step = std::uint32_t(step)};
      const double loss = engine.train(micro_batches, state);
      engine.reduce_tied_gradients();
      nn::StepState ref_state = state;
      ref_state.batch = &batch;
      nn::Context ctx(ref_state);
      const float ref_loss = ref->run_forward(ctx).loss;
      ref->run_backward(ctx);
      EXPECT_NEAR(loss, ref_loss, 1e-5 + 1e-4 * std::abs(ref_loss)) << "step " << step;
      if (step == 0) {
        EXPECT_FALSE(engine.parameters().empty());
        for (nn::Parameter* q : engine.parameters())
          EXPECT_TRUE(all_close(q->grad, ref->parameter(q->name).grad, kFp32)) << "gradient of " << q->name;
        double ref_norm = 0;
        for (nn::Parameter* q : ref->parameters())
          for (std::int64_t i = 0; i < q->grad.numel(); ++i) ref_norm += double(q->grad.data<float>()[i]) * q->grad.data<float>()[i];
        EXPECT_NEAR(engine.squared_gradient_norm(), ref_norm, 1e-4 * ref_norm) << "gradient norm";
      }
      par_adam.step();
      ref_adam.step();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PipelineModels, ::testing::Values("gpt", "bert", "llama"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tidal
