// Text generation from a GPT or a Llama: loading one for inference (a tidal checkpoint or a
// Hugging Face directory), a single-sequence sampler over a KV-cache decoder on the CPU in fp32
// (models/decoder.h: exactly the model's training forward, one position at a time), and sampling
// during training (train.sample_every).
#pragma once

#include "config/config.h"
#include "data/bpe_tokenizer.h"
#include "models/decoder.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tidal::engine {

// A GPT or Llama ready to generate: its configuration and its model, materialized on the host
// (one process) with the weights of `source`.
struct InferenceModel {
  config::Config config;  // a checkpoint's stored config, or what a Hugging Face config.json gives
  std::unique_ptr<models::Model> model;
  std::string source;  // what was loaded, for people ("Hugging Face GPT2LMHeadModel in gpt2/")
};

// Loads `path`: a Hugging Face directory (config.json + model.safetensors or its shards), a tidal
// checkpoint step directory, or a checkpoint directory and its `latest`. A BERT or ViT model, or a
// path that is none of these, is a tidal::Error.
InferenceModel load_for_inference(const std::string& path);

struct SampleOptions {
  std::int64_t max_new_tokens = 64;
  float temperature = 1.0f;  // 0 = greedy: the most likely token (the lowest id among equals)
  std::int64_t top_k = 0;    // only the k most likely tokens are drawn from; 0 = every token
  std::uint64_t seed = 1;    // the n-th new token's draw is Philox(seed, n): the same seed, the same text
  std::function<void(std::int32_t)> on_token{};  // each new token, as soon as it is picked
};

// Throws tidal::Error unless `prompt` (`what` names it in the message) is non-empty, its ids are
// in [0, vocab_size) and it fits in max_positions.
void check_prompt(std::span<const std::int32_t> prompt, std::int64_t vocab_size, std::int64_t max_positions,
                  const std::string& what);

// Token ids written as text: integers separated by spaces or commas ("1 2 3", "1,2,3"). Anything
// else is a tidal::Error naming `what` (the option or key they came from).
std::vector<std::int32_t> parse_token_ids(const std::string& text, const std::string& what);

// The bytes of `ids` under `tokenizer`; an id past the tokenizer's vocabulary (a model vocabulary
// padded beyond it) shows as "<|id|>" instead of failing.
std::string decode_ids(const data::BpeTokenizer& tokenizer, std::span<const std::int32_t> ids);

// Generation from a decoder (models/decoder.h): feeds a prompt and picks each next token,
// greedily or by seeded draws.
class Sampler {
 public:
  explicit Sampler(std::unique_ptr<models::Decoder> decoder);

  std::int64_t vocab_size() const { return decoder_->vocab_size(); }
  std::int64_t max_positions() const { return decoder_->max_positions(); }
  std::int64_t positions() const { return decoder_->positions(); }
  void reset() { decoder_->reset(); }
  void feed(std::int32_t token) { decoder_->feed(token); }
  Tensor logits() { return decoder_->logits(); }

  // Feeds `prompt` from an empty cache and picks up to options.max_new_tokens tokens after it,
  // each fed in turn. Returns the new tokens: fewer than asked exactly when the model's positions
  // ran out (the last token picked is the one the last position predicts).
  std::vector<std::int32_t> generate(std::span<const std::int32_t> prompt, const SampleOptions& options);

 private:
  std::unique_ptr<models::Decoder> decoder_;
};

// Sampling during training (train.sample_every): a greedy continuation of train.sample_prompt
// from the trainer's own weights, as one progress line. Text comes from data.tokenizer; without
// it data.kind = "text" is byte-level (a byte is its id) and other kinds show ids.
class TrainingSampler {
 public:
  static constexpr std::int64_t kTokens = 32;  // new tokens per sample

  // Reads data.tokenizer and turns train.sample_prompt into ids; a bad prompt or tokenizer is an
  // error here, before training starts.
  explicit TrainingSampler(const config::Config& cfg);

  // Whether to sample after `step` (1-based) of a run ending at `end`.
  bool due(std::int64_t step, std::int64_t end) const { return step % every_ == 0 || step == end; }
  // "step N: sample ..." from `model`'s current weights. A run whose weights are not plainly in
  // one process (several ranks, or chunks: bf16 / fp16, ZeRO, offload) cannot sample: the first
  // call says so, the later ones return "".
  std::string line(models::Model& model, int world_size, std::int64_t step);

 private:
  std::string text_of(std::span<const std::int32_t> ids) const;

  std::int64_t every_;
  config::ModelConfig model_;
  std::optional<data::BpeTokenizer> tokenizer_;
  bool byte_level_ = false;  // data.kind = "text" without a tokenizer
  std::vector<std::int32_t> prompt_;
  bool told_unavailable_ = false;
};

}  // namespace tidal::engine
