#include "engine/sampler.h"

#include "config/hf_model.h"
#include "core/philox.h"
#include "engine/checkpoint.h"
#include "engine/hf_checkpoint.h"
#include "io/safetensors.h"
#include "models/factory.h"
#include "ops/bias.h"
#include "ops/gelu.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/residual.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

namespace tidal::engine {
namespace {

namespace fs = std::filesystem;

void require_gpt(const config::Config& cfg, const std::string& path) {
  TIDAL_CHECK(cfg.model.type == "gpt", "tidal sample generates with GPT models; '{}' is a {} model", path,
              cfg.model.type);
}

// Every parameter of `model` from the tidal checkpoint file `weights`, by name.
void copy_checkpoint_weights(const io::SafetensorsReader& weights, models::Model& model) {
  for (nn::Parameter* p : model.parameters()) {
    const auto it = weights.entries().find(p->name);
    TIDAL_CHECK(it != weights.entries().end(), "'{}' has no tensor '{}' that its config's model has", weights.path(),
                p->name);
    TIDAL_CHECK(it->second.dtype == DType::f32 && it->second.shape == p->shape,
                "'{}': tensor '{}' is {}{}, the model's parameter is f32{}", weights.path(), p->name,
                dtype_name(it->second.dtype), it->second.shape.str(), p->shape.str());
    p->data.copy_from(weights.view(p->name));
    weights.release(p->name);
  }
}

InferenceModel load_tidal_checkpoint(const std::string& path) {
  const StoredCheckpoint stored = open_checkpoint(path);
  InferenceModel m;
  m.config = stored.config;
  require_gpt(m.config, path);
  m.gpt = models::gpt_config(m.config.model);
  m.model = models::make_model(m.config.model);
  m.model->materialize(m.config.train.seed);
  copy_checkpoint_weights(*stored.weights, *m.model);
  m.source = fmt::format("tidal checkpoint {}", stored.step_dir);
  return m;
}

InferenceModel load_hf_directory(const std::string& dir) {
  InferenceModel m;
  m.config = config::load_config("", {"model.init_from=" + dir});
  require_gpt(m.config, dir);
  m.gpt = models::gpt_config(m.config.model);
  m.model = models::make_model(m.config.model);
  m.model->materialize(m.config.train.seed);
  const io::HfModelSpec spec = config::hf_spec(m.config.model);
  load_hf_weights(dir, spec, m.model->parameters());
  m.source = fmt::format("Hugging Face {} in {}", io::hf_architecture(spec.family), dir);
  return m;
}

// A parameter's tensor for the sampler: fp32, whole, on the host (copied there from a GPU).
Tensor host_weight(models::Model& model, const std::string& name, const Shape& shape) {
  const nn::Parameter& p = model.parameter(name);
  std::string held = p.data.defined() ? p.data.str() : "not held as a tensor";
  if (p.full_shape.size() > 0) held += fmt::format(", a block of {}", p.full_shape.str());
  TIDAL_CHECK(p.data.defined() && p.data.dtype() == DType::f32 && p.full_shape.size() == 0,
              "sampling needs the whole fp32 weights in this process, and '{}' is {}: sample from a checkpoint "
              "(tidal sample) instead",
              name, held);
  TIDAL_ASSERT(p.data.shape() == shape, "{}: {}, expected {}", name, p.data.str(), shape.str());
  return p.data.device().is_cuda() ? p.data.clone(host_allocator()) : p.data;
}

// y [1, out] = x [1, in] w^T + b, w [out, in].
void linear(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  ops::gemm(y, x, w, {.trans_b = true});
  ops::bias_add(y, b);
}

// A uniform double in [0, 1) from the n-th draw of `seed`.
double uniform(std::uint64_t seed, std::uint64_t n) {
  const PhiloxCounter c = philox4x32({std::uint32_t(n), std::uint32_t(n >> 32), 0, 0},
                                     {std::uint32_t(seed), std::uint32_t(seed >> 32)});
  return (double(c[0] >> 5) * 67108864.0 + double(c[1] >> 6)) / 9007199254740992.0;  // 53 bits
}

// The token after `logits` [V]: greedy, or the `draw`-th draw of the seed from the temperature's
// softmax over the top-k tokens.
std::int32_t pick(const float* logits, std::int64_t V, const SampleOptions& o, std::uint64_t draw) {
  if (o.temperature == 0.0f) return std::int32_t(std::max_element(logits, logits + V) - logits);
  // The candidates, most likely first (lowest id among equals), so top_k = 1 is the greedy pick.
  std::vector<std::int32_t> ids(static_cast<std::size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  const std::size_t k = o.top_k > 0 && o.top_k < V ? std::size_t(o.top_k) : std::size_t(V);
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(k), ids.end(), [&](std::int32_t a, std::int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double top = logits[ids[0]];
  std::vector<double> weight(k);
  double sum = 0;
  for (std::size_t i = 0; i < k; ++i) sum += weight[i] = std::exp((double(logits[ids[i]]) - top) / o.temperature);
  const double target = uniform(o.seed, draw) * sum;
  double below = 0;
  for (std::size_t i = 0; i < k; ++i) {
    below += weight[i];
    if (target < below) return ids[i];
  }
  return ids[k - 1];  // rounding left the target at the very end
}

// The bytes of a UTF-8 sequence starting at text[i] (1 to 4), or 0 when none starts there.
std::size_t utf8_length(const std::string& text, std::size_t i) {
  const std::uint8_t lead = std::uint8_t(text[i]);
  std::size_t n = 0;
  if (lead < 0x80) n = 1;
  else if (lead >= 0xc2 && lead <= 0xdf) n = 2;
  else if (lead >= 0xe0 && lead <= 0xef) n = 3;
  else if (lead >= 0xf0 && lead <= 0xf4) n = 4;
  if (n == 0 || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((std::uint8_t(text[i + k]) & 0xc0) != 0x80) return 0;
  return n;
}

// `text` quoted on one line: control characters and bytes that are not UTF-8 (a sample may stop
// inside a character) escaped, so a sample keeps to its progress line.
std::string quote_on_one_line(const std::string& text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const char ch = text[i];
    const std::size_t n = utf8_length(text, i);
    if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (ch == '"' || ch == '\\') out += fmt::format("\\{}", ch);
    else if (n == 0 || std::uint8_t(ch) < 0x20 || ch == 0x7f) out += fmt::format("\\x{:02x}", std::uint8_t(ch));
    else out.append(text, i, n);
    i += n == 0 ? 1 : n;
  }
  return out + "\"";
}

}  // namespace

InferenceModel load_gpt_for_inference(const std::string& path) {
  const fs::path dir(path);
  TIDAL_CHECK(fs::is_directory(dir),
              "'{}' is not a directory: give a tidal checkpoint directory (or one of its step-* directories) or a "
              "Hugging Face GPT-2 directory (config.json + model.safetensors)",
              path);
  if (fs::exists(dir / "config.json")) return load_hf_directory(path);
  TIDAL_CHECK(fs::exists(dir / "model.safetensors") || fs::exists(dir / "latest"),
              "'{}' is neither a Hugging Face directory (no config.json) nor a tidal checkpoint (no model.safetensors, "
              "no 'latest' file): give a checkpoint.dir of a run, one of its step-* directories, or a directory "
              "written by save_pretrained or tidal export",
              path);
  return load_tidal_checkpoint(path);
}

void check_prompt(std::span<const std::int32_t> prompt, std::int64_t vocab_size, std::int64_t max_positions,
                  const std::string& what) {
  TIDAL_CHECK(!prompt.empty(), "{} is empty: give at least one token to continue", what);
  TIDAL_CHECK(std::int64_t(prompt.size()) <= max_positions,
              "{} has {} tokens, more than the model's {} positions: shorten it", what, prompt.size(), max_positions);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    TIDAL_CHECK(prompt[i] >= 0 && prompt[i] < vocab_size,
                "{}: token {} (id {}) is outside the model's vocabulary [0, {}): use ids of the model's tokenizer",
                what, i, prompt[i], vocab_size);
}

std::vector<std::int32_t> parse_token_ids(const std::string& text, const std::string& what) {
  auto separator = [&](std::size_t i) {
    return text[i] == ' ' || text[i] == ',' || text[i] == '\t' || text[i] == '\n';
  };
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < text.size();) {
    if (separator(i)) {
      ++i;
      continue;
    }
    std::int64_t id = 0;
    const std::size_t first = i;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i)
      id = std::min<std::int64_t>(id * 10 + (text[i] - '0'), std::int64_t(1) << 40);  // past int32: an error below
    TIDAL_CHECK(i > first && (i == text.size() || separator(i)) && id <= std::numeric_limits<std::int32_t>::max(),
                "{} '{}': expected token ids (non-negative integers) separated by spaces or commas, e.g. \"464 2068 "
                "7586\"",
                what, text);
    ids.push_back(std::int32_t(id));
  }
  return ids;
}

std::string decode_ids(const data::BpeTokenizer& tokenizer, std::span<const std::int32_t> ids) {
  std::string out;
  std::vector<std::uint32_t> run;  // ids the tokenizer has, decoded together
  auto flush = [&] {
    out += tokenizer.decode(run);
    run.clear();
  };
  for (const std::int32_t id : ids) {
    if (id >= 0 && std::uint32_t(id) < tokenizer.vocab_size()) {
      run.push_back(std::uint32_t(id));
      continue;
    }
    flush();
    out += fmt::format("<|{}|>", id);
  }
  flush();
  return out;
}

Sampler::Sampler(models::Model& model, const models::GptConfig& cfg)
    : C_(cfg.n_embd), V_(cfg.vocab_size), P_(cfg.max_positions ? cfg.max_positions : cfg.seq_len),
      n_head_(cfg.n_head), ln_eps_(cfg.ln_eps), activation_(cfg.activation) {
  TIDAL_ASSERT(n_head_ > 0 && C_ % n_head_ == 0, "n_embd {} over {} heads", C_, n_head_);
  wte_ = host_weight(model, "wte.weight", {V_, C_});
  wpe_ = host_weight(model, "wpe.weight", {P_, C_});
  head_ = cfg.tie_embeddings ? wte_ : host_weight(model, "lm_head.weight", {V_, C_});
  ln_f_w_ = host_weight(model, "ln_f.weight", {C_});
  ln_f_b_ = host_weight(model, "ln_f.bias", {C_});
  Allocator& host = host_allocator();
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string b = fmt::format("blocks.{}.", l);
    blocks_.push_back({.ln_1_w = host_weight(model, b + "ln_1.weight", {C_}),
                       .ln_1_b = host_weight(model, b + "ln_1.bias", {C_}),
                       .qkv_w = host_weight(model, b + "attn.qkv.weight", {3 * C_, C_}),
                       .qkv_b = host_weight(model, b + "attn.qkv.bias", {3 * C_}),
                       .proj_w = host_weight(model, b + "attn.proj.weight", {C_, C_}),
                       .proj_b = host_weight(model, b + "attn.proj.bias", {C_}),
                       .ln_2_w = host_weight(model, b + "ln_2.weight", {C_}),
                       .ln_2_b = host_weight(model, b + "ln_2.bias", {C_}),
                       .fc_w = host_weight(model, b + "mlp.fc.weight", {4 * C_, C_}),
                       .fc_b = host_weight(model, b + "mlp.fc.bias", {4 * C_}),
                       .mlp_proj_w = host_weight(model, b + "mlp.proj.weight", {C_, 4 * C_}),
                       .mlp_proj_b = host_weight(model, b + "mlp.proj.bias", {C_}),
                       .k_cache = Tensor::empty({P_, C_}, DType::f32, host),
                       .v_cache = Tensor::empty({P_, C_}, DType::f32, host)});
  }
  x_ = Tensor::empty({1, C_}, DType::f32, host);
  a_ = Tensor::empty({1, C_}, DType::f32, host);
  qkv_ = Tensor::empty({1, 3 * C_}, DType::f32, host);
  y_ = Tensor::empty({1, C_}, DType::f32, host);
  o_ = Tensor::empty({1, C_}, DType::f32, host);
  fc_ = Tensor::empty({1, 4 * C_}, DType::f32, host);
  gelu_ = Tensor::empty({1, 4 * C_}, DType::f32, host);
  mean_ = Tensor::empty({1}, DType::f32, host);
  rstd_ = Tensor::empty({1}, DType::f32, host);
  logits_ = Tensor::empty({1, V_}, DType::f32, host);
  scores_.resize(std::size_t(P_));
}

void Sampler::attend(const Block& b, const float* q, std::int64_t t, float* y) {
  const std::int64_t hd = C_ / n_head_;
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* k = b.k_cache.data<float>();
  const float* v = b.v_cache.data<float>();
  for (int h = 0; h < n_head_; ++h) {
    const std::int64_t off = h * hd;
    float top = -INFINITY;
    for (std::int64_t j = 0; j <= t; ++j) {
      float s = 0;
      for (std::int64_t d = 0; d < hd; ++d) s += q[off + d] * k[j * C_ + off + d];
      scores_[std::size_t(j)] = s * scale;
      top = std::max(top, scores_[std::size_t(j)]);
    }
    float sum = 0;
    for (std::int64_t j = 0; j <= t; ++j) sum += scores_[std::size_t(j)] = std::exp(scores_[std::size_t(j)] - top);
    float* out = y + off;
    std::fill(out, out + hd, 0.0f);
    for (std::int64_t j = 0; j <= t; ++j) {
      const float p = scores_[std::size_t(j)] / sum;
      for (std::int64_t d = 0; d < hd; ++d) out[d] += p * v[j * C_ + off + d];
    }
  }
}

void Sampler::feed(std::int32_t token) {
  TIDAL_CHECK(positions_ < P_, "the sequence fills all {} positions of the model: nothing more can be fed", P_);
  TIDAL_CHECK(token >= 0 && token < V_, "token id {} is outside the model's vocabulary [0, {})", token, V_);
  const std::int64_t t = positions_;
  float* x = x_.data<float>();
  const float* tok = wte_.data<float>() + token * C_;
  const float* pos = wpe_.data<float>() + t * C_;
  for (std::int64_t c = 0; c < C_; ++c) x[c] = tok[c] + pos[c];
  for (Block& b : blocks_) {
    // x += proj(attention(ln_1(x)))
    ops::layernorm_forward(a_, mean_, rstd_, x_, b.ln_1_w, b.ln_1_b, ln_eps_);
    linear(qkv_, a_, b.qkv_w, b.qkv_b);
    const float* qkv = qkv_.data<float>();
    std::copy(qkv + C_, qkv + 2 * C_, b.k_cache.data<float>() + t * C_);
    std::copy(qkv + 2 * C_, qkv + 3 * C_, b.v_cache.data<float>() + t * C_);
    attend(b, qkv, t, y_.data<float>());
    linear(o_, y_, b.proj_w, b.proj_b);
    ops::accumulate(x_, o_);
    // x += proj(gelu(fc(ln_2(x))))
    ops::layernorm_forward(a_, mean_, rstd_, x_, b.ln_2_w, b.ln_2_b, ln_eps_);
    linear(fc_, a_, b.fc_w, b.fc_b);
    ops::gelu_forward(gelu_, fc_, activation_);
    linear(o_, gelu_, b.mlp_proj_w, b.mlp_proj_b);
    ops::accumulate(x_, o_);
  }
  ++positions_;
  logits_ready_ = false;
}

Tensor Sampler::logits() {
  TIDAL_ASSERT(positions_ > 0, "logits before any token was fed");
  if (!logits_ready_) {
    ops::layernorm_forward(a_, mean_, rstd_, x_, ln_f_w_, ln_f_b_, ln_eps_);
    ops::gemm(logits_, a_, head_, {.trans_b = true});  // GPT-2's head has no bias
    logits_ready_ = true;
  }
  return logits_.reshape({V_});
}

std::vector<std::int32_t> Sampler::generate(std::span<const std::int32_t> prompt, const SampleOptions& o) {
  check_prompt(prompt, V_, P_, "the prompt");
  TIDAL_CHECK(o.max_new_tokens >= 0, "sampling: the number of new tokens must be >= 0, got {}", o.max_new_tokens);
  TIDAL_CHECK(std::isfinite(o.temperature) && o.temperature >= 0,
              "sampling: the temperature must be >= 0 (0 = greedy), got {}", o.temperature);
  TIDAL_CHECK(o.top_k >= 0, "sampling: top-k must be >= 0 (0 = every token), got {}", o.top_k);
  reset();
  for (const std::int32_t token : prompt) feed(token);
  std::vector<std::int32_t> out;
  while (std::int64_t(out.size()) < o.max_new_tokens) {
    if (!out.empty()) {
      if (positions_ == P_) break;  // the last position's prediction was the last token possible
      feed(out.back());
    }
    out.push_back(pick(logits().data<float>(), V_, o, out.size()));
    if (o.on_token) o.on_token(out.back());
  }
  return out;
}

TrainingSampler::TrainingSampler(const config::Config& cfg)
    : every_(cfg.train.sample_every), gpt_(models::gpt_config(cfg.model)) {
  TIDAL_ASSERT(every_ > 0 && cfg.model.type == "gpt", "sampling during training of a {} every {} steps",
               cfg.model.type, every_);
  const std::string& prompt = cfg.train.sample_prompt;
  if (!cfg.data.tokenizer.empty()) {
    TIDAL_CHECK(fs::is_regular_file(cfg.data.tokenizer),
                "data.tokenizer '{}' does not exist or is not a file: give a tokenizer.json (train.sample_every "
                "decodes its samples with it)",
                cfg.data.tokenizer);
    tokenizer_ = data::BpeTokenizer::from_file(cfg.data.tokenizer);
    for (const std::uint32_t id : tokenizer_->encode(prompt)) prompt_.push_back(std::int32_t(id));
    if (prompt_.empty()) prompt_.push_back(std::int32_t(tokenizer_->eot_id().value_or(0)));
  } else if (cfg.data.kind == "text") {
    byte_level_ = true;
    for (const char ch : prompt) prompt_.push_back(std::uint8_t(ch));
    if (prompt_.empty()) prompt_.push_back('\n');
  } else {
    prompt_ = parse_token_ids(prompt, "train.sample_prompt (token ids: there is no data.tokenizer)");
    if (prompt_.empty()) prompt_.push_back(0);
  }
  check_prompt(prompt_, gpt_.vocab_size, gpt_.max_positions ? gpt_.max_positions : gpt_.seq_len,
               "train.sample_prompt");
}

std::string TrainingSampler::text_of(std::span<const std::int32_t> ids) const {
  if (tokenizer_) return quote_on_one_line(decode_ids(*tokenizer_, ids));
  if (byte_level_) {
    std::string bytes;
    for (const std::int32_t id : ids) bytes += id < 256 ? std::string(1, char(id)) : fmt::format("<|{}|>", id);
    return quote_on_one_line(bytes);
  }
  return fmt::format("[{}]", fmt::join(ids, " "));
}

std::string TrainingSampler::line(models::Model& model, int world_size, std::int64_t step) {
  std::optional<Sampler> sampler;
  std::string unavailable = fmt::format("this run has {} ranks", world_size);
  if (world_size == 1) {
    try {
      sampler.emplace(model, gpt_);
    } catch (const Error&) {  // the weights are not plain fp32 tensors: the chunks hold them
      unavailable = "this run keeps its weights in chunks";
    }
  }
  if (!sampler) {
    if (told_unavailable_) return "";
    told_unavailable_ = true;
    return fmt::format("train.sample_every: no samples in this run: sampling during training reads the fp32 weights "
                       "of a single process (one rank, train.precision = \"fp32\", zero.stage = 0, memory.offload = "
                       "\"none\"), and {}; sample from a checkpoint with `tidal sample` instead",
                       unavailable);
  }
  const std::vector<std::int32_t> ids = sampler->generate(prompt_, {.max_new_tokens = kTokens, .temperature = 0.0f});
  return fmt::format("step {}: sample {} -> {}", step, text_of(prompt_), text_of(ids));
}

}  // namespace tidal::engine
