// Text generation from a GPT: loading one for inference (a tidal checkpoint or a Hugging Face
// GPT-2 directory), a single-sequence sampler with a KV cache on the CPU in fp32, and sampling
// during training (train.sample_every). The sampler computes exactly the training forward of
// models/gpt.h (pre-LN blocks, causal attention, the model's GELU, ln_f, the tied or untied head),
// one position at a time: each new token costs one position through the blocks, attending over
// the keys and values the cache holds for the positions before it.
// Invariants: the cache holds positions [0, positions()) of the sequence fed since reset(); a
// sequence never goes past the model's learned positions (wpe's rows).
#pragma once

#include "config/config.h"
#include "data/bpe_tokenizer.h"
#include "models/gpt.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tidal::engine {

// A GPT ready to generate: its configuration and its model, materialized on the host (one
// process) with the weights of `source`.
struct InferenceModel {
  config::Config config;  // a checkpoint's stored config, or what a Hugging Face config.json gives
  models::GptConfig gpt;  // the same, as the model's own options
  std::unique_ptr<models::Model> model;
  std::string source;  // what was loaded, for people ("Hugging Face GPT2LMHeadModel in gpt2/")
};

// Loads `path`: a Hugging Face directory (config.json + model.safetensors or its shards), a tidal
// checkpoint step directory, or a checkpoint directory and its `latest`. A BERT or ViT model, or a
// path that is none of these, is a tidal::Error.
InferenceModel load_gpt_for_inference(const std::string& path);

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

class Sampler {
 public:
  // Reads the weights of `model`, a GPT of `cfg` held whole by one process in fp32. They are
  // shared (views), except that weights on a GPU are copied to the host; a model whose weights
  // are not plainly there (chunks, shards) is a tidal::Error.
  Sampler(models::Model& model, const models::GptConfig& cfg);

  std::int64_t vocab_size() const { return V_; }
  std::int64_t max_positions() const { return P_; }
  std::int64_t positions() const { return positions_; }  // fed since reset()
  void reset() { positions_ = 0; }

  // Runs `token` through the blocks at position positions(), appending its keys and values to the
  // cache. A token outside the vocabulary, or a full cache, is a tidal::Error.
  void feed(std::int32_t token);
  // The logits [V] of the token after the last one fed (a view, valid until the next feed).
  Tensor logits();

  // Feeds `prompt` from an empty cache and picks up to options.max_new_tokens tokens after it,
  // each fed in turn. Returns the new tokens: fewer than asked exactly when the model's positions
  // ran out (the last token picked is the one the last position predicts).
  std::vector<std::int32_t> generate(std::span<const std::int32_t> prompt, const SampleOptions& options);

 private:
  struct Block {
    Tensor ln_1_w, ln_1_b;  // [C]
    Tensor qkv_w;           // [3C, C]: rows q | k | v, heads contiguous in each
    Tensor qkv_b;           // [3C]
    Tensor proj_w;          // [C, C]
    Tensor proj_b;          // [C]
    Tensor ln_2_w, ln_2_b;  // [C]
    Tensor fc_w;            // [4C, C]
    Tensor fc_b;            // [4C]
    Tensor mlp_proj_w;      // [C, 4C]
    Tensor mlp_proj_b;      // [C]
    Tensor k_cache;         // [P, C]: the keys of positions [0, positions())
    Tensor v_cache;         // [P, C]: their values
  };
  // Attention of the query of position t (q [C]) over the cache's keys and values [0, t] -> y [C].
  void attend(const Block& b, const float* q, std::int64_t t, float* y);

  std::int64_t C_, V_, P_;
  int n_head_;
  float ln_eps_;
  ops::GeluForm activation_;
  Tensor wte_;   // [V, C]
  Tensor wpe_;   // [P, C]
  Tensor head_;  // [V, C]: wte (tied) or lm_head.weight
  Tensor ln_f_w_, ln_f_b_;  // [C]
  std::vector<Block> blocks_;
  // One position's activations.
  Tensor x_;       // [1, C]: the residual stream
  Tensor a_;       // [1, C]: a LayerNorm's output
  Tensor qkv_;     // [1, 3C]
  Tensor y_;       // [1, C]: attention's output
  Tensor o_;       // [1, C]: a sublayer's output projection
  Tensor fc_;      // [1, 4C]
  Tensor gelu_;    // [1, 4C]
  Tensor mean_, rstd_;  // [1]: LayerNorm's statistics (outputs of the op that inference does not read)
  Tensor logits_;  // [1, V]
  std::vector<float> scores_;  // [P]: one head's attention weights
  std::int64_t positions_ = 0;
  bool logits_ready_ = false;  // logits_ belong to the last position fed
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
  models::GptConfig gpt_;
  std::optional<data::BpeTokenizer> tokenizer_;
  bool byte_level_ = false;  // data.kind = "text" without a tokenizer
  std::vector<std::int32_t> prompt_;
  bool told_unavailable_ = false;
};

}  // namespace tidal::engine
