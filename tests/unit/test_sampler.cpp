// The KV-cache sampler (engine/inference/sampler.h) against the model's own training forward: logits at
// every position within fp32 tolerance (tied and untied heads, both GELU forms), greedy picks the
// forward's argmax, seeded draws reproduce, top_k = 1 is greedy, the positions' limit, prompt
// errors, loading a tidal checkpoint, and sampling during training.
#include "config/config.h"
#include "engine/checkpoint/checkpointer.h"
#include "engine/inference/sampler.h"
#include "models/factory.h"
#include "models/gpt/decoder.h"
#include "models/gpt/family.h"
#include "models/gpt/gpt.h"
#include "nn/runner.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;

constexpr std::int64_t kT = 16, kV = 29;
constexpr std::uint64_t kSeed = 7;

models::GptConfig tiny_gpt(bool tied = true, ops::GeluForm activation = ops::GeluForm::tanh) {
  return {.n_layer = 2, .n_head = 3, .n_embd = 24, .vocab_size = kV, .seq_len = kT, .activation = activation,
          .init_std = 0.5f,  // logits spread well apart, so argmax comparisons have no near-ties
          .tie_embeddings = tied};
}

// The training forward's logits [T, V] for tokens [1, T].
Tensor forward_logits(models::Model& model, const Tensor& tokens) {
  const nn::Batch batch{.tokens = tokens, .targets = tokens};
  nn::Runner runner;
  nn::StepState state{.runner = &runner, .training = false, .seed = kSeed, .batch = &batch};
  nn::Context ctx(state);
  return model.run_forward(ctx).logits.reshape({tokens.dim(1), kV}).clone();
}

// The sampler's logits [T, V] after each token of tokens [1, T], fed one at a time.
Tensor cached_logits(engine::Sampler& sampler, const Tensor& tokens) {
  const std::int64_t T = tokens.dim(1);
  Tensor out = Tensor::empty({T, kV});
  sampler.reset();
  for (std::int64_t t = 0; t < T; ++t) {
    sampler.feed(tokens.data<std::int32_t>()[t]);
    out.slice(0, t, t + 1).reshape({kV}).copy_from(sampler.logits());
  }
  return out;
}

Tensor as_tokens(const std::vector<std::int32_t>& ids) {
  Tensor t = Tensor::empty({1, std::int64_t(ids.size())}, DType::i32);
  std::copy(ids.begin(), ids.end(), t.data<std::int32_t>());
  return t;
}

class SamplerHeads : public ::testing::TestWithParam<std::pair<bool, ops::GeluForm>> {};

TEST_P(SamplerHeads, LogitsAtEveryPositionMatchTheFullForward) {
  const auto [tied, activation] = GetParam();
  const models::GptConfig cfg = tiny_gpt(tied, activation);
  auto model = models::make_gpt(cfg);
  model->materialize(kSeed);
  const Tensor tokens = testing::randint({1, kT}, 11, 0, kV);
  engine::Sampler sampler(std::make_unique<models::GptDecoder>(*model, cfg));
  EXPECT_TRUE(all_close(cached_logits(sampler, tokens), forward_logits(*model, tokens), kFp32));
  EXPECT_EQ(sampler.positions(), kT);
}

INSTANTIATE_TEST_SUITE_P(Heads, SamplerHeads,
                         ::testing::Values(std::pair{true, ops::GeluForm::tanh}, std::pair{false, ops::GeluForm::erf}),
                         [](const auto& info) { return info.param.first ? "TiedTanh" : "UntiedErf"; });

TEST(Sampler, GreedyPicksTheForwardsArgmax) {
  const models::GptConfig cfg = tiny_gpt();
  auto model = models::make_gpt(cfg);
  model->materialize(kSeed);
  engine::Sampler sampler(std::make_unique<models::GptDecoder>(*model, cfg));
  const std::vector<std::int32_t> prompt{3, 1, 4};
  std::vector<std::int32_t> streamed;
  const engine::SampleOptions greedy{
      .max_new_tokens = 12, .temperature = 0.0f, .on_token = [&](std::int32_t id) { streamed.push_back(id); }};
  const std::vector<std::int32_t> ids = sampler.generate(prompt, greedy);
  ASSERT_EQ(ids.size(), 12u);
  EXPECT_EQ(streamed, ids);
  std::vector<std::int32_t> all = prompt;
  all.insert(all.end(), ids.begin(), ids.end());
  const Tensor ref = forward_logits(*model, as_tokens(all));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const float* row = ref.data<float>() + std::int64_t(prompt.size() + i - 1) * kV;
    EXPECT_EQ(ids[i], std::max_element(row, row + kV) - row) << "new token " << i;
  }
}

TEST(Sampler, SeededDrawsReproduceAndTopOneIsGreedy) {
  const models::GptConfig cfg = tiny_gpt();
  auto model = models::make_gpt(cfg);
  model->materialize(kSeed);
  engine::Sampler sampler(std::make_unique<models::GptDecoder>(*model, cfg));
  const std::vector<std::int32_t> prompt{5};
  const engine::SampleOptions drawn{.max_new_tokens = 15, .temperature = 1.0f, .seed = 5};
  const std::vector<std::int32_t> a = sampler.generate(prompt, drawn);
  EXPECT_EQ(sampler.generate(prompt, drawn), a);
  engine::SampleOptions other = drawn;
  other.seed = 6;
  EXPECT_NE(sampler.generate(prompt, other), a);

  const std::vector<std::int32_t> greedy = sampler.generate(prompt, {.max_new_tokens = 15, .temperature = 0.0f});
  EXPECT_EQ(sampler.generate(prompt, {.max_new_tokens = 15, .temperature = 1.5f, .top_k = 1, .seed = 9}), greedy);
  EXPECT_NE(a, greedy);  // temperature 1 over a spread distribution does draw other tokens

  // top_k = 3: each token is among the 3 most likely at its position.
  const std::vector<std::int32_t> top3 = sampler.generate(prompt, {.max_new_tokens = 15, .top_k = 3, .seed = 3});
  std::vector<std::int32_t> all = prompt;
  all.insert(all.end(), top3.begin(), top3.end());
  const Tensor ref = forward_logits(*model, as_tokens(all));
  for (std::size_t i = 0; i < top3.size(); ++i) {
    const float* row = ref.data<float>() + std::int64_t(prompt.size() + i - 1) * kV;
    const auto above = std::count_if(row, row + kV, [&](float l) { return l > row[top3[i]]; });
    EXPECT_LT(above, 3) << "new token " << i;
  }
}

TEST(Sampler, StopsWhenThePositionsAreFull) {
  const models::GptConfig cfg = tiny_gpt();
  auto model = models::make_gpt(cfg);
  model->materialize(kSeed);
  engine::Sampler sampler(std::make_unique<models::GptDecoder>(*model, cfg));
  const std::vector<std::int32_t> prompt(kT - 2, 1);
  // Positions 14 and 15 take two new tokens, and the last position predicts a third.
  EXPECT_EQ(sampler.generate(prompt, {.max_new_tokens = 10, .temperature = 0.0f}).size(), 3u);
  EXPECT_EQ(sampler.positions(), kT);
  EXPECT_THROW(sampler.feed(1), Error);
  const std::vector<std::int32_t> full(kT, 1);
  EXPECT_EQ(sampler.generate(full, {.max_new_tokens = 10, .temperature = 0.0f}).size(), 1u);
}

TEST(Sampler, BadPromptsAndOptionsAreErrors) {
  const models::GptConfig cfg = tiny_gpt();
  auto model = models::make_gpt(cfg);
  model->materialize(kSeed);
  engine::Sampler sampler(std::make_unique<models::GptDecoder>(*model, cfg));
  const engine::SampleOptions greedy{.max_new_tokens = 2, .temperature = 0.0f};
  EXPECT_THROW(sampler.generate(std::vector<std::int32_t>{}, greedy), Error);
  EXPECT_THROW(sampler.generate(std::vector<std::int32_t>{1, kV}, greedy), Error);
  EXPECT_THROW(sampler.generate(std::vector<std::int32_t>{-1}, greedy), Error);
  EXPECT_THROW(sampler.generate(std::vector<std::int32_t>(kT + 1, 1), greedy), Error);
  EXPECT_THROW(sampler.generate(std::vector<std::int32_t>{1}, {.temperature = -1.0f}), Error);
  EXPECT_THROW(sampler.generate(std::vector<std::int32_t>{1}, {.top_k = -2}), Error);

  EXPECT_EQ(engine::parse_token_ids("1, 2 3,4", "--prompt-ids"), (std::vector<std::int32_t>{1, 2, 3, 4}));
  EXPECT_TRUE(engine::parse_token_ids("", "--prompt-ids").empty());
  EXPECT_THROW(engine::parse_token_ids("1 x", "--prompt-ids"), Error);
  EXPECT_THROW(engine::parse_token_ids("-1", "--prompt-ids"), Error);
  EXPECT_THROW(engine::parse_token_ids("99999999999", "--prompt-ids"), Error);
}

// A tiny GPT run's configuration (the markov data needs no file).
config::Config tiny_config() {
  config::Config cfg;
  cfg.model.n_layer = 2;
  cfg.model.n_head = 3;
  cfg.model.n_embd = 24;
  cfg.model.vocab_size = kV;
  cfg.model.seq_len = kT;
  cfg.model.family_keys = {{"tie_embeddings", false}, {"activation", "gelu_erf"}};
  cfg.train.precision = DType::f32;
  cfg.train.sample_every = 4;
  cfg.train.sample_prompt = "2 7";
  return cfg;
}

TEST(Sampler, LoadsATidalCheckpoint) {
  const config::Config cfg = tiny_config();
  auto model = models::make_model(cfg.model);
  model->materialize(kSeed + 1);  // weights unlike those of the loader's own materialize
  std::vector<std::pair<std::string, Tensor>> weights;
  for (nn::Parameter* p : model->parameters()) weights.emplace_back(p->name, p->data);
  const auto dir = std::filesystem::temp_directory_path() / ("sampler-ckpt-" + std::to_string(::getpid()));
  engine::write_checkpoint(dir.string(), {.step = 3, .config_toml = config::to_toml(cfg)}, weights, 1);

  engine::InferenceModel loaded = engine::load_for_inference(dir.string());
  EXPECT_FALSE(models::gpt_keys(loaded.config.model).tie_embeddings);
  EXPECT_EQ(models::gpt_keys(loaded.config.model).activation, ops::GeluForm::erf);
  engine::Sampler sampler(models::make_decoder(*loaded.model, loaded.config.model));
  const Tensor tokens = testing::randint({1, kT}, 12, 0, kV);
  EXPECT_TRUE(all_close(cached_logits(sampler, tokens), forward_logits(*model, tokens), kFp32));
  std::filesystem::remove_all(dir);

  EXPECT_THROW(engine::load_for_inference(dir.string()), Error);  // gone
}

TEST(Sampler, SamplesDuringTrainingOrSaysOnceWhyNot) {
  const config::Config cfg = tiny_config();
  auto model = models::make_model(cfg.model);
  model->materialize(kSeed);
  engine::TrainingSampler training(cfg);
  EXPECT_TRUE(training.due(8, 10));
  EXPECT_TRUE(training.due(10, 10));
  EXPECT_FALSE(training.due(9, 10));

  engine::Sampler sampler(models::make_decoder(*model, cfg.model));
  const std::vector<std::int32_t> ids = sampler.generate(std::vector<std::int32_t>{2, 7},
                                                         {.max_new_tokens = engine::TrainingSampler::kTokens,
                                                          .temperature = 0.0f});
  EXPECT_EQ(training.line(*model, 1, 8), fmt::format("step 8: sample [2 7] -> [{}]", fmt::join(ids, " ")));

  const std::string why = training.line(*model, 2, 8);
  EXPECT_NE(why.find("this run has 2 ranks"), std::string::npos) << why;
  EXPECT_EQ(training.line(*model, 2, 12), "");  // said once

  engine::TrainingSampler in_chunks(cfg);
  model->parameter("wte.weight").data = Tensor();  // as the chunk keeper leaves it between steps
  const std::string chunks = in_chunks.line(*model, 1, 4);
  EXPECT_NE(chunks.find("keeps its weights in chunks"), std::string::npos) << chunks;

  config::Config bad = cfg;
  bad.train.sample_prompt = "2 99";
  EXPECT_THROW(engine::TrainingSampler{bad}, Error);

  // Byte-level text (data.kind = "text" without a tokenizer): the prompt's bytes are its ids, and
  // the line escapes what would break it (a newline, a byte that is not UTF-8).
  config::Config text = cfg;
  text.model.vocab_size = 256;
  text.data.kind = config::DataKind::text;
  text.train.sample_prompt = "\"\xc3\xa9\n\xff";
  auto byte_model = models::make_model(text.model);
  byte_model->materialize(kSeed);
  const std::string sample = engine::TrainingSampler(text).line(*byte_model, 1, 3);
  EXPECT_TRUE(sample.starts_with("step 3: sample \"\\\"\xc3\xa9\\n\\xff\" -> \"")) << sample;
}

}  // namespace
}  // namespace tidal
