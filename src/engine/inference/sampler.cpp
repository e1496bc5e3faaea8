#include "engine/inference/sampler.h"

#include "core/philox.h"
#include "engine/checkpoint/reader.h"
#include "engine/finetune.h"
#include "engine/hf_checkpoint.h"
#include "models/lora.h"
#include "models/factory.h"
#include "models/registry.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

namespace tidal::engine {
namespace {

namespace fs = std::filesystem;

void require_generative(const config::Config& cfg, const std::string& path) {
  TIDAL_CHECK(models::generates_text(cfg.model), "tidal sample generates with {} models; '{}' is a {} model",
              models::generating_families(), path, cfg.model.type);
}

InferenceModel load_tidal_checkpoint(const std::string& path) {
  CheckpointReader reader(path);
  InferenceModel m;
  m.config = reader.stored_config();
  require_generative(m.config, path);
  m.source = fmt::format("tidal checkpoint {}", reader.step_dir());
  if (m.config.finetune.method == config::FinetuneMethod::lora) {  // the decoders read the merged weights
    m.model = load_adapted_model(reader);
    models::merge_lora(*m.model);
    m.source += " (LoRA adapters folded into the base)";
    return m;
  }
  m.model = models::make_model(m.config.model);
  m.model->materialize(m.config.train.seed);
  for (nn::Parameter* p : m.model->parameters()) reader.read_block(p->name, *p, p->data);
  return m;
}

InferenceModel load_hf_directory(const std::string& dir) {
  InferenceModel m;
  m.config = config::load_config("", {"model.init_from=" + dir});
  require_generative(m.config, dir);
  m.model = models::make_model(m.config.model);
  m.model->materialize(m.config.train.seed);
  load_hf_weights(dir, m.config.model, m.model->parameters());
  m.source = fmt::format("Hugging Face {} in {}", models::hf_adapter(m.config.model).architecture, dir);
  return m;
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

Sampler::Sampler(std::unique_ptr<models::Decoder> decoder) : decoder_(std::move(decoder)) {}

InferenceModel load_for_inference(const std::string& path) {
  const fs::path dir(path);
  TIDAL_CHECK(fs::is_directory(dir),
              "'{}' is not a directory: give a tidal checkpoint directory (or one of its step-* directories) or a "
              "Hugging Face GPT-2 or Llama directory (config.json + model.safetensors)",
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

std::vector<std::int32_t> Sampler::generate(std::span<const std::int32_t> prompt, const SampleOptions& o) {
  models::Decoder& d = *decoder_;
  const std::int64_t V = d.vocab_size(), P = d.max_positions();
  check_prompt(prompt, V, P, "the prompt");
  TIDAL_CHECK(o.max_new_tokens >= 0, "sampling: the number of new tokens must be >= 0, got {}", o.max_new_tokens);
  TIDAL_CHECK(std::isfinite(o.temperature) && o.temperature >= 0,
              "sampling: the temperature must be >= 0 (0 = greedy), got {}", o.temperature);
  TIDAL_CHECK(o.top_k >= 0, "sampling: top-k must be >= 0 (0 = every token), got {}", o.top_k);
  d.reset();
  for (const std::int32_t token : prompt) d.feed(token);
  std::vector<std::int32_t> out;
  while (std::int64_t(out.size()) < o.max_new_tokens) {
    if (!out.empty()) {
      if (d.positions() == P) break;  // the last position's prediction was the last token possible
      d.feed(out.back());
    }
    out.push_back(pick(d.logits().data<float>(), V, o, out.size()));
    if (o.on_token) o.on_token(out.back());
  }
  return out;
}

TrainingSampler::TrainingSampler(const config::Config& cfg) : every_(cfg.train.sample_every), model_(cfg.model) {
  TIDAL_ASSERT(every_ > 0, "sampling during training every {} steps", every_);
  TIDAL_CHECK(models::generates_text(cfg.model),
              "train.sample_every = {} samples text from {} models, and model.type is \"{}\": set "
              "train.sample_every = 0", every_, models::generating_families(), cfg.model.type);
  const std::string& prompt = cfg.train.sample_prompt;
  if (!cfg.data.tokenizer.empty()) {
    TIDAL_CHECK(fs::is_regular_file(cfg.data.tokenizer),
                "data.tokenizer '{}' does not exist or is not a file: give a tokenizer.json (train.sample_every "
                "decodes its samples with it)",
                cfg.data.tokenizer);
    tokenizer_ = data::BpeTokenizer::from_file(cfg.data.tokenizer);
    for (const std::uint32_t id : tokenizer_->encode(prompt)) prompt_.push_back(std::int32_t(id));
    if (prompt_.empty()) prompt_.push_back(std::int32_t(tokenizer_->eot_id().value_or(0)));
  } else if (cfg.data.kind == config::DataKind::text) {
    byte_level_ = true;
    for (const char ch : prompt) prompt_.push_back(std::uint8_t(ch));
    if (prompt_.empty()) prompt_.push_back('\n');
  } else {
    prompt_ = parse_token_ids(prompt, "train.sample_prompt (token ids: there is no data.tokenizer)");
    if (prompt_.empty()) prompt_.push_back(0);
  }
  const std::int64_t positions = models::model_traits(cfg.model).positions;
  check_prompt(prompt_, cfg.model.vocab_size, positions ? positions : cfg.model.seq_len, "train.sample_prompt");
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
  const std::vector<nn::Parameter*> params = model.parameters();
  const bool adapted = std::any_of(params.begin(), params.end(), [](const nn::Parameter* p) { return p->frozen; });
  if (adapted) unavailable = "this run trains LoRA adapters, which the decoders read folded into the base";
  if (world_size == 1 && !adapted) {
    try {
      sampler.emplace(models::make_decoder(model, model_));
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
