#include "config/config.h"

#include "config/hf_model.h"
#include "config/options.h"
#include "config/schema.h"
#include "core/error.h"
#include "models/lora.h"
#include "models/registry.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

namespace tidal::config {
namespace {

std::string type_name(Key::Type t) {
  switch (t) {
    case Key::Type::integer: return "an integer";
    case Key::Type::number: return "a number";
    case Key::Type::string: return "a string";
    case Key::Type::boolean: return "true or false";
  }
  return "?";
}

std::string describe(const toml::node& n) {
  if (auto s = n.value_exact<std::string>()) return "the string \"" + *s + "\"";
  if (auto i = n.value_exact<std::int64_t>()) return "the integer " + std::to_string(*i);
  if (auto d = n.value_exact<double>()) return fmt::format("the number {}", *d);
  if (auto b = n.value_exact<bool>()) return *b ? "true" : "false";
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  return "a date or time";
}

std::string known_keys_near(const std::string& name) {
  const std::string section = name.substr(0, name.find('.'));
  std::string out;
  for (const Key& k : schema())
    if (k.name.starts_with(section + ".")) out += (out.empty() ? "" : ", ") + k.name;
  if (out.empty())
    for (const Key& k : schema()) {
      const std::string s = k.name.substr(0, k.name.find('.'));
      if (out.find("[" + s + "]") == std::string::npos) out += (out.empty() ? "" : " ") + ("[" + s + "]");
    }
  return out;
}

// A TOML node as the key's type; `where` names the source ("cfg.toml" or "--set").
Value convert(const Key& key, const toml::node& n, const std::string& where) {
  switch (key.type) {
    case Key::Type::integer:
      if (auto v = n.value_exact<std::int64_t>()) return *v;
      break;
    case Key::Type::number:
      if (auto v = n.value_exact<double>()) return *v;
      if (auto v = n.value_exact<std::int64_t>()) return double(*v);
      break;
    case Key::Type::string:
      if (auto v = n.value_exact<std::string>()) return *v;
      if (auto v = n.value_exact<bool>(); v && key.boolean_names) return *v;
      break;
    case Key::Type::boolean:
      if (auto v = n.value_exact<bool>()) return *v;
      break;
  }
  throw Error(fmt::format("{}: {} must be {}, got {}", where, key.name, type_name(key.type), describe(n)));
}

const Key& lookup(const std::string& name, const std::string& where) {
  const Key* k = find_key(name);
  TIDAL_CHECK(k != nullptr, "{}: unknown key '{}'; known keys there: {}", where, name, known_keys_near(name));
  return *k;
}

// `set_by` records each key given and where ("cfg.toml:12", "--set model.n_layer=4").
void apply_table(Config& cfg, const toml::table& table, const std::string& prefix, const std::string& where,
                 SetBy& set_by) {
  for (auto&& [k, node] : table) {
    const std::string name = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* sub = node.as_table()) {
      // A sub-table is allowed where the schema has keys below it.
      const bool known = std::any_of(schema().begin(), schema().end(),
                                     [&](const Key& key) { return key.name.starts_with(name + "."); });
      TIDAL_CHECK(known, "{}: unknown section [{}]; known keys there: {}", where, name, known_keys_near(name));
      apply_table(cfg, *sub, name, where, set_by);
      continue;
    }
    const Key& key = lookup(name, where);
    const auto& src = node.source();
    const std::string at = src.begin ? fmt::format("{}:{}", where, src.begin.line) : where;
    try {
      key.set(cfg, convert(key, node, at));
    } catch (const Error& e) {  // a value outside the key's range or names: say where it came from
      throw Error(fmt::format("{}: {}", at, e.what()));
    }
    set_by[name] = at;
  }
}

void apply_override(Config& cfg, const std::string& text, SetBy& set_by) {
  const auto eq = text.find('=');
  TIDAL_CHECK(eq != std::string::npos && eq > 0, "--set '{}': expected section.key=value, e.g. --set train.steps=100",
              text);
  const std::string name = text.substr(0, eq), raw = text.substr(eq + 1);
  const Key& key = lookup(name, "--set " + text);
  set_by[name] = "--set " + text;
  // The value in TOML syntax (10, 3e-4, "cpu"); for a string key a bare word is the string.
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + raw);
  } catch (const toml::parse_error&) {
    TIDAL_CHECK(key.type == Key::Type::string, "--set {}: {} must be {}, got '{}'", text, name, type_name(key.type), raw);
    key.set(cfg, raw);
    return;
  }
  const toml::node& node = *parsed["v"].node();
  key.set(cfg, key.type == Key::Type::string && !node.is_string() ? Value(raw) : convert(key, node, "--set " + text));
}

// [model]'s keys every family has, then the family's own (`family`).
void validate_model(const ModelConfig& m, const models::Family& family) {
  const bool images = family.task == models::ModelTask::image_classification;
  TIDAL_CHECK(m.n_layer >= 1 && m.n_head >= 1 && m.n_embd >= 1, "model.n_layer, model.n_head and model.n_embd must be >= 1");
  TIDAL_CHECK(m.n_embd % m.n_head == 0, "model.n_embd ({}) must be divisible by model.n_head ({})", m.n_embd, m.n_head);
  TIDAL_CHECK(m.dropout >= 0.0 && m.dropout < 1.0, "model.dropout must be in [0, 1), got {}", m.dropout);
  if (!images) {
    TIDAL_CHECK(m.vocab_size >= 2, "model.vocab_size must be >= 2, got {}", m.vocab_size);
    TIDAL_CHECK(m.seq_len >= 2, "model.seq_len must be >= 2, got {}", m.seq_len);
  }
  if (family.validate) family.validate(m);  // the family's own keys
  const std::int64_t positions = models::model_traits(m).positions;
  TIDAL_CHECK(images || positions == 0 || positions >= m.seq_len,
              "model.seq_len ({}) is longer than the model's {} learned positions (model.max_positions): shorten "
              "the sequences or leave model.max_positions at 0 (= model.seq_len)",
              m.seq_len, positions);
  TIDAL_CHECK(m.ln_eps >= 0.0 && m.ln_eps < 1.0, "model.ln_eps must be in [0, 1) (0 = the model's own), got {}", m.ln_eps);
}

void validate_data(const Config& c, models::ModelTask task) {
  const ModelConfig& m = c.model;
  const DataConfig& d = c.data;
  const bool images = task == models::ModelTask::image_classification;
  TIDAL_CHECK(images == (d.kind == DataKind::images),
              "model.type = \"{}\" cannot train on data.kind = \"{}\" (the image classifiers, {}, train on images; the "
              "language models on markov, tokens, indexed, text or chat)",
              m.type, d.kind, fmt::join(models::families_for(models::ModelTask::image_classification), ", "));
  TIDAL_CHECK(d.kind != DataKind::chat || task == models::ModelTask::causal_lm,
              "data.kind = \"chat\" trains a causal language model on the answers, and model.type = \"{}\" is a "
              "masked language model: use one of {}",
              m.type, fmt::join(models::families_for(models::ModelTask::causal_lm), ", "));
  if (d.kind == DataKind::markov) {
    TIDAL_CHECK(d.markov_branching >= 1 && d.markov_branching <= m.vocab_size,
                "data.markov_branching must be in [1, model.vocab_size], got {}", d.markov_branching);
  } else if (d.kind != DataKind::images) {
    TIDAL_CHECK(!d.path.empty(), "data.kind = \"{}\" needs data.path (the data)", d.kind);
  }
  // The files themselves are the dataset's to open (data/dataset.h), where a run starts.
  TIDAL_CHECK(d.eval_path.empty() || d.kind == DataKind::tokens || d.kind == DataKind::indexed ||
                  d.kind == DataKind::text || d.kind == DataKind::chat,
              "data.eval_path names token data to evaluate on, and data.kind is \"{}\": leave it unset", d.kind);
  // Chat data packs its conversations as documents whatever data.cross_document_attention says.
  const bool tokens = d.kind == DataKind::tokens || d.kind == DataKind::indexed || d.kind == DataKind::text ||
                      d.kind == DataKind::chat;
  TIDAL_CHECK(d.cross_document_attention || tokens,
              "data.cross_document_attention = false packs documents of token data, and data.kind is \"{}\", whose "
              "samples are one sequence each: leave it unset",
              d.kind);
  TIDAL_CHECK(d.eod_id >= -1 && d.eod_id < m.vocab_size,
              "data.eod_id must be a token id below model.vocab_size ({}), or -1 for none; got {}", m.vocab_size,
              d.eod_id);
  TIDAL_CHECK(d.cross_document_attention || d.kind == DataKind::indexed || d.kind == DataKind::chat || d.eod_id >= 0,
              "data.cross_document_attention = false needs the documents' ends: data.kind = \"{}\" does not record "
              "them, so set data.eod_id to the tokenizer's end-of-text id (GPT-2: 50256), or use data.kind = "
              "\"indexed\" (Megatron's .idx records each document)",
              d.kind);
}

void validate_train(const Config& c, const models::Family& family) {
  const ModelConfig& m = c.model;
  const bool images = family.task == models::ModelTask::image_classification;
  const TrainConfig& t = c.train;
  TIDAL_CHECK(t.steps >= 1, "train.steps must be >= 1, got {}", t.steps);
  TIDAL_CHECK(t.batch_size >= 1, "train.batch_size must be >= 1, got {}", t.batch_size);
  const std::int64_t micro = t.micro_batch_size == 0 ? t.batch_size : t.micro_batch_size;
  TIDAL_CHECK(t.batch_size % micro == 0, "train.micro_batch_size ({}) must divide train.batch_size ({})", micro,
              t.batch_size);
  TIDAL_CHECK(t.lr > 0 && t.min_lr >= 0 && t.min_lr <= t.lr, "need 0 <= train.min_lr <= train.lr and train.lr > 0");
  TIDAL_CHECK(t.grad_clip >= 0, "train.grad_clip must be >= 0 (0 = off)");
  TIDAL_CHECK(t.weight_decay >= 0,
              "train.weight_decay must be >= 0, got {}: AdamW's decoupled decay shrinks the weights toward zero, and a "
              "negative one grows them without bound", t.weight_decay);
  TIDAL_CHECK(t.max_skipped_steps >= 1, "train.max_skipped_steps must be >= 1, got {}", t.max_skipped_steps);
  TIDAL_CHECK(t.loss_scale > 0, "train.loss_scale must be > 0, got {}", t.loss_scale);
  TIDAL_CHECK(t.loss_scale_window >= 1, "train.loss_scale_window must be >= 1, got {}", t.loss_scale_window);
  TIDAL_CHECK(t.beta1 >= 0 && t.beta1 < 1 && t.beta2 >= 0 && t.beta2 < 1, "train.beta1 and train.beta2 must be in [0, 1)");
  // Whether the model's family generates text is the sampler's to say (models/registry.h).
  TIDAL_CHECK(t.sample_every == 0 || family.task == models::ModelTask::causal_lm,
              "train.sample_every = {} samples text from a causal language model, and model.type = \"{}\" is not "
              "one: set train.sample_every = 0",
              t.sample_every, m.type);
  TIDAL_CHECK(t.activation_checkpointing_k >= 1, "train.activation_checkpointing_k must be >= 1, got {}",
              t.activation_checkpointing_k);
  TIDAL_CHECK(t.activation_offload == ActivationOffload::none || t.activation_checkpointing == Recompute::blocks ||
                  t.activation_checkpointing == Recompute::every_k,
              "train.activation_offload = \"{}\" moves checkpointed block inputs, but train.activation_checkpointing "
              "is \"{}\", which checkpoints no blocks: set it to \"blocks\" or \"every_k\"",
              t.activation_offload, t.activation_checkpointing);

  TIDAL_CHECK(!t.fp8 || t.device == Device::Kind::cuda,
              "train.precision = \"fp8\" runs the linear layers' products on a GPU's fp8 tensor cores, and "
              "train.device is \"cpu\": set train.device = \"cuda\", or train.precision = \"bf16\"");
  TIDAL_CHECK(t.attention != ops::AttentionKernels::cudnn || t.device == Device::Kind::cuda,
              "train.attention = \"cudnn\" runs attention through cuDNN on a GPU, and train.device is \"cpu\": set "
              "train.device = \"cuda\", or train.attention = \"auto\"");
  TIDAL_CHECK(t.attention != ops::AttentionKernels::cudnn || t.precision != DType::f32,
              "train.attention = \"cudnn\": cuDNN's fused attention takes bf16 or fp16, and train.precision is "
              "\"fp32\": set train.precision = \"bf16\", or train.attention = \"auto\"");
  TIDAL_CHECK(t.loss_chunks >= 1, "train.loss_chunks must be >= 1 (1 = the logits all at once), got {}",
              t.loss_chunks);
  TIDAL_CHECK(t.loss_chunks == 1 || !images,
              "train.loss_chunks = {} cuts the logits of a sequence's positions into blocks, and model.type = \"{}\" "
              "classifies images, one row of logits per image: set train.loss_chunks = 1", t.loss_chunks, m.type);
}

// The sizes and limits of [parallel], [zero], [memory] and [checkpoint], and how the memory keys
// go together.
void validate_memory(const Config& c, bool images) {
  const ModelConfig& m = c.model;
  const TrainConfig& t = c.train;
  const ParallelConfig& p = c.parallel;
  TIDAL_CHECK(p.bucket_mb > 0, "parallel.bucket_mb must be > 0, got {}", p.bucket_mb);
  TIDAL_CHECK(p.zb_memory == 0 || p.zb_memory >= 1,
              "parallel.zb_memory = {} is below 1F1B's own activation memory (1): set it to 1 or more (1.05: within "
              "5% of 1F1B's), or 0 for the paper's count of W's held back",
              p.zb_memory);
  TIDAL_CHECK(p.timeout_s > 0, "parallel.timeout_s must be > 0 seconds, got {}", p.timeout_s);
  TIDAL_CHECK(c.zero.stage >= 0 && c.zero.stage <= 3, "zero.stage must be 0, 1, 2 or 3, got {}", c.zero.stage);
  TIDAL_CHECK(c.memory.warmup_fraction > 0 && c.memory.warmup_fraction <= 1,
              "memory.warmup_fraction must be in (0, 1], got {}", c.memory.warmup_fraction);
  if (!c.memory.device_limit.empty()) parse_bytes(c.memory.device_limit, "memory.device_limit");
  if (!c.memory.host_limit.empty()) parse_bytes(c.memory.host_limit, "memory.host_limit");
  if (!c.memory.disk_limit.empty()) parse_bytes(c.memory.disk_limit, "memory.disk_limit");
  TIDAL_CHECK(c.memory.disk_limit.empty() || !c.memory.disk_dir.empty(),
              "memory.disk_limit caps the optimizer states in memory.disk_dir: set memory.disk_dir too, or leave "
              "memory.disk_limit unset");
  TIDAL_CHECK(c.checkpoint.keep >= 1, "checkpoint.keep must be >= 1");
  TIDAL_CHECK(parse_bytes(c.checkpoint.buffer_size, "checkpoint.buffer_size") >= (1u << 20),
              "checkpoint.buffer_size = \"{}\" is below 1 MiB: give e.g. \"256MiB\"", c.checkpoint.buffer_size);

  const bool offload = c.memory.offload != Offload::none;
  if (offload) {
    // Without a GPU the device tier is host memory: only a cap makes it a budget.
    TIDAL_CHECK(t.device == Device::Kind::cuda || !c.memory.device_limit.empty(),
                "memory.offload = \"{}\" needs memory.device_limit on a machine without a GPU (the device tier is "
                "host memory with a cap), e.g. --set memory.device_limit=64MiB",
                c.memory.offload);
  }
  TIDAL_CHECK(offload || c.memory.host_limit.empty(),
              "memory.host_limit caps the chunks the host holds beside a device tier: set memory.offload to \"chunk\" "
              "or \"static\" (it is \"none\"), or leave memory.host_limit unset");
  TIDAL_CHECK(c.memory.disk_dir.empty() || (offload && !c.memory.host_limit.empty()) ||
                  c.finetune.base_offload == BaseOffload::disk,
              "memory.disk_dir keeps the optimizer states that do not fit under memory.host_limit in a file: set "
              "memory.offload to \"chunk\" or \"static\" (it is \"{}\") and memory.host_limit (it is \"{}\"), or "
              "finetune.base_offload = \"disk\" (a LoRA run's frozen base), or leave memory.disk_dir unset",
              c.memory.offload, c.memory.host_limit);
  if (c.memory.embedding_on_host) {
    TIDAL_CHECK(offload,
                "memory.embedding_on_host keeps the embedding tables on the host beside the device tier's chunks: set "
                "memory.offload to \"chunk\" or \"static\" (it is \"none\"), or leave memory.embedding_on_host unset");
    TIDAL_CHECK(!images,
                "memory.embedding_on_host places token embedding tables, and model.type = \"{}\" embeds images "
                "(compute the device should do): leave memory.embedding_on_host unset", m.type);
    TIDAL_CHECK(!models::model_traits(m).tied_head,
                "memory.embedding_on_host keeps the token table on the host, but with model.tie_embeddings = true the "
                "LM head multiplies by that table on the device every step (the whole table would cross each time): "
                "set model.tie_embeddings = false to give the head a table of its own, or leave "
                "memory.embedding_on_host unset");
  }
}

void validate_finetune(const Config& c) {
  const FinetuneConfig& f = c.finetune;
  if (f.method == FinetuneMethod::full) {
    TIDAL_CHECK(f.adapters_from.empty(),
                "finetune.adapters_from = \"{}\" gives adapters, and finetune.method = \"full\" trains none: set "
                "finetune.method = \"lora\", or leave finetune.adapters_from unset", f.adapters_from);
    TIDAL_CHECK(f.base_dtype == BaseDType::compute,
                "finetune.base_dtype = \"nf4\" holds a frozen base, and finetune.method = \"full\" trains every "
                "parameter: set finetune.method = \"lora\" (QLoRA), or leave finetune.base_dtype unset");
    TIDAL_CHECK(f.base_offload == BaseOffload::none,
                "finetune.base_offload = \"{}\" streams a frozen base, and finetune.method = \"full\" trains every "
                "parameter (memory.offload moves those): set finetune.method = \"lora\", or leave "
                "finetune.base_offload unset", f.base_offload);
    return;
  }
  TIDAL_CHECK(f.base_offload != BaseOffload::disk || !c.memory.disk_dir.empty(),
              "finetune.base_offload = \"disk\" keeps the frozen base in a file: set memory.disk_dir to a directory "
              "with room for it (tidal plan gives frozen_bytes), e.g. --set memory.disk_dir=/tmp");
  TIDAL_CHECK(f.lora_alpha > 0, "finetune.lora_alpha must be > 0, got {}", f.lora_alpha);
  TIDAL_CHECK(f.lora_dropout >= 0 && f.lora_dropout < 1, "finetune.lora_dropout must be in [0, 1), got {}",
              f.lora_dropout);
  TIDAL_CHECK(models::find_family(c.model.type).hf,
              "finetune.method = \"lora\" finds the linears by their Hugging Face names, and model.type = \"{}\" has "
              "no Hugging Face layout", c.model.type);
  models::lora_targets(c.model, f.lora_targets);
}

void validate(const Config& c) {
  const models::Family& family = models::find_family(c.model.type);  // an unknown type is an error listing the known
  const bool images = family.task == models::ModelTask::image_classification;
  validate_model(c.model, family);
  validate_data(c, family.task);
  validate_train(c, family);
  check_layout(c);
  validate_memory(c, images);
  validate_finetune(c);
}
}  // namespace

void check_layout(const Config& c) {
  const TrainConfig& t = c.train;
  const ParallelConfig& p = c.parallel;
  TIDAL_CHECK(p.data >= 1 && p.pipeline >= 1 && p.sequence >= 1 && p.tensor.size >= 1 && p.tensor.depth >= 1 &&
                  p.virtual_stages >= 1,
              "parallel sizes must be >= 1");
  TIDAL_CHECK(p.sequence == 1 || models::find_family(c.model.type).task != models::ModelTask::image_classification,
              "parallel.sequence = {} splits token sequences, and model.type = \"{}\" is not split by position (it "
              "classifies images): set parallel.sequence = 1 and use parallel.data or parallel.tensor.size",
              p.sequence, c.model.type);
  const int experts = models::model_traits(c.model).experts;
  TIDAL_CHECK(experts == 0 || p.tensor.size == 1 || p.tensor.mode == parallel::TensorMode::d1,
              "model.type = \"{}\" routes each token by its whole hidden state, and parallel.tensor.mode = \"{}\" "
              "splits it by features: use parallel.tensor.mode = \"1d\" (it splits each expert), or "
              "parallel.tensor.size = 1", c.model.type, parallel::tensor_mode_name(p.tensor.mode));
  TIDAL_CHECK(p.expert == 1 || experts > 0,
              "parallel.expert = {} spreads a mixture's experts over ranks, and model.type = \"{}\" has none: use "
              "model.type = {}, or parallel.expert = 1", p.expert, c.model.type,
              fmt::join(models::families_reading("experts"), " or "));
  TIDAL_CHECK(p.expert == 1 || experts % p.expert == 0,
              "parallel.expert = {} must divide model.experts = {}: each rank of an expert group holds as many "
              "experts", p.expert, experts);
  // Pipeline schedules that cannot run (pipeline/schedule.h, pipeline/partition.h say the same).
  TIDAL_CHECK(p.virtual_stages == 1 || p.schedule == pipeline::ScheduleKind::interleaved ||
                  p.schedule == pipeline::ScheduleKind::zb_v,
              "parallel.virtual_stages = {} needs parallel.schedule = \"interleaved\" or \"zb-v\" (it is \"{}\")",
              p.virtual_stages, p.schedule);
  TIDAL_CHECK(p.schedule != pipeline::ScheduleKind::zb_v || p.virtual_stages == 2,
              "parallel.schedule = \"zb-v\" runs two model chunks per rank in a V: set parallel.virtual_stages = 2 "
              "(it is {})", p.virtual_stages);
  TIDAL_CHECK(p.virtual_stages == 1 || p.pipeline > 1,
              "parallel.virtual_stages = {} interleaves the model chunks of several pipeline stages, and "
              "parallel.pipeline is 1: set parallel.pipeline > 1, or parallel.virtual_stages = 1",
              p.virtual_stages);
  // (One chunk per rank and a block per layer: check_model_fits says it for the layout.)
  // A checkpointed run of blocks (every_k) is one layer and never split between stages.
  const bool runs = t.activation_checkpointing == Recompute::every_k && t.activation_checkpointing_k > 1;
  const std::int64_t block_layers = runs ? (c.model.n_layer + t.activation_checkpointing_k - 1) / t.activation_checkpointing_k
                                         : c.model.n_layer;
  TIDAL_CHECK((p.virtual_stages == 1 && !runs) || p.pipeline * p.virtual_stages == 1 ||
                  block_layers >= p.pipeline * p.virtual_stages,
              "{} pipeline stages (parallel.pipeline x parallel.virtual_stages = {} x {}) for {} block layers ({} "
              "transformer blocks{}): every stage needs at least one; use more layers (model.n_layer) or fewer "
              "stages{}",
              p.pipeline * p.virtual_stages, p.pipeline, p.virtual_stages, block_layers, c.model.n_layer,
              runs ? fmt::format(" in checkpointed runs of train.activation_checkpointing_k = {}", t.activation_checkpointing_k) : "",
              runs ? ", or a smaller train.activation_checkpointing_k" : "");
  const std::int64_t local = p.data >= 1 ? t.batch_size / p.data : 0;  // divisibility: ParallelContext
  if (p.schedule == pipeline::ScheduleKind::interleaved && local > 0 && (t.micro_batch_size == 0 || local % t.micro_batch_size == 0)) {
    const std::int64_t micro_batches = t.micro_batch_size ? local / t.micro_batch_size : 1;
    TIDAL_CHECK(micro_batches % p.pipeline == 0,
                "parallel.schedule = \"interleaved\" runs micro-batches in groups of parallel.pipeline = {}: the {} "
                "micro-batches per step (train.batch_size / parallel.data / train.micro_batch_size) must be a "
                "multiple of {}",
                p.pipeline, micro_batches, p.pipeline);
  }
}

std::uint64_t parse_bytes(const std::string& text, const std::string& key) {
  std::size_t pos = 0;
  double number = 0;
  try {
    number = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw Error(fmt::format("{} = \"{}\" is not a size (examples: \"512MiB\", \"2GB\", \"1048576\")", key, text));
  }
  std::string unit = text.substr(pos);
  unit.erase(std::remove_if(unit.begin(), unit.end(), [](unsigned char ch) { return std::isspace(ch); }), unit.end());
  static const std::map<std::string, double> units = {
      {"", 1},         {"B", 1},        {"KB", 1e3},          {"MB", 1e6},          {"GB", 1e9},
      {"TB", 1e12},    {"KiB", 1024.0}, {"MiB", 1048576.0},   {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  auto it = units.find(unit);
  TIDAL_CHECK(it != units.end() && number >= 0, "{} = \"{}\": unknown unit '{}' (use B, KB, MB, GB, KiB, MiB, GiB)", key,
              text, unit);
  return std::uint64_t(std::llround(number * it->second));
}

namespace {

// A [model] key the config sets away from its default that another family reads and model.type's
// does not (it would be ignored): an error naming where it was set, who reads it and the fix. (At
// its default it changes nothing: a whole config written out, to_toml's, holds every key.)
void check_family_keys(const Config& cfg, const SetBy& set_by) {
  const models::Family& family = models::find_family(cfg.model.type);
  if (family.keys.empty()) return;  // a program's family: it may read any key
  const Config defaults;
  for (const auto& [name, where] : set_by) {
    if (!name.starts_with("model.")) continue;
    const std::string key = name.substr(6);
    const Key& k = *find_key(name);
    const bool mine = std::any_of(family.keys.begin(), family.keys.end(),
                                  [&](const models::FamilyKey& f) { return f.name == key; });
    if (mine || k.get(cfg) == k.get(defaults)) continue;
    const std::vector<std::string> readers = models::families_reading(key);
    TIDAL_CHECK(readers.empty(), "{}: {} is read by model.type = {} only, and model.type = \"{}\" would ignore it: "
                "remove it, or set model.type to one of those", where, name, fmt::join(readers, " or "), cfg.model.type);
  }
}

// Reads `text` (the contents of `where`, or of the file `path` when text is null), applies the
// overrides and validates. A stored config (text) already holds what its model.init_from gave.
Config build_config(const std::string* text, const std::string& where, const std::vector<std::string>& overrides) {
  Config cfg;
  SetBy set_by;
  if (text || !where.empty()) {
    TIDAL_CHECK(text || std::filesystem::is_regular_file(where), "config file '{}' does not exist", where);
    toml::table table;
    try {
      table = text ? toml::parse(*text, where) : toml::parse_file(where);
    } catch (const toml::parse_error& e) {
      throw Error(fmt::format("{}:{}:{}: {}", where, e.source().begin.line, e.source().begin.column, e.description()));
    }
    apply_table(cfg, table, "", where, set_by);
  }
  for (const std::string& o : overrides) apply_override(cfg, o, set_by);
  if (!text && !cfg.model.init_from.empty()) apply_init_from(cfg, set_by);
  if (!text) check_family_keys(cfg, set_by);  // a stored config holds every key, at its value
  // A GPU trains in bf16 unless told otherwise (its tensor cores' type; fp32 master weights).
  if (!set_by.count("train.precision") && cfg.train.device == Device::Kind::cuda) cfg.train.precision = DType::bf16;
  validate(cfg);
  return cfg;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return build_config(nullptr, path, overrides);
}

Config load_config_text(const std::string& toml_text, const std::string& where) {
  return build_config(&toml_text, where, {});
}

std::string to_toml(const Config& cfg) {
  std::string out, section;
  for (const Key& k : schema()) {
    const std::string s = k.name.substr(0, k.name.rfind('.'));
    if (s != section) {
      out += (out.empty() ? "[" : "\n[") + s + "]\n";
      section = s;
    }
    out += fmt::format("{} = {}\n", k.name.substr(k.name.rfind('.') + 1), format_value(k.get(cfg)));
  }
  return out;
}

}  // namespace tidal::config
