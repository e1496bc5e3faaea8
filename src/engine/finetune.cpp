#include "engine/finetune.h"

#include "config/options.h"
#include "core/error.h"
#include "core/process.h"
#include "engine/hf_checkpoint.h"
#include "engine/model_data.h"
#include "io/safetensors.h"
#include "models/factory.h"
#include "models/lora.h"
#include "models/registry.h"
#include "ops/nf4.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace tidal::engine {
namespace fs = std::filesystem;
namespace {

// adapter_config.json against the [finetune] section: the same kind of adapters on the same linears.
void check_adapter_config(const std::string& dir, const config::Config& cfg) {
  const fs::path path = fs::path(dir) / "adapter_config.json";
  std::ifstream in(path);
  TIDAL_CHECK(in.good(), "finetune.adapters_from = \"{}\": no adapter_config.json there (a directory PEFT's "
              "save_pretrained wrote)", dir);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TIDAL_CHECK(false, "'{}' is not JSON: {}", path.string(), e.what());
  }
  const config::FinetuneConfig& f = cfg.finetune;
  TIDAL_CHECK(j.value("peft_type", "") == "LORA", "'{}': peft_type is {}; tidal reads LoRA adapters (\"LORA\")",
              path.string(), j.contains("peft_type") ? j["peft_type"].dump() : "missing");
  const int rank = j.value("r", 0);
  TIDAL_CHECK(rank == f.lora_rank, "'{}': the adapters' rank r is {}: set finetune.lora_rank = {}", path.string(),
              rank, rank);
  const double alpha = j.value("lora_alpha", 0.0);
  TIDAL_CHECK(alpha == f.lora_alpha, "'{}': lora_alpha is {}: set finetune.lora_alpha = {}", path.string(), alpha,
              alpha);
  const auto empty = [&](const char* key) { return !j.contains(key) || j[key].is_null() || j[key].empty(); };
  TIDAL_CHECK(!j.value("use_rslora", false) && !j.value("use_dora", false) && j.value("bias", "none") == "none" &&
                  empty("modules_to_save") && empty("layers_to_transform") && empty("rank_pattern") &&
                  empty("alpha_pattern"),
              "'{}': tidal reads plain LoRA adapters (no rsLoRA, DoRA, biases, modules_to_save, layers_to_transform "
              "or per-module ranks)", path.string());
  const nlohmann::json theirs = j.value("target_modules", nlohmann::json::array());
  TIDAL_CHECK(theirs.is_array() && std::all_of(theirs.begin(), theirs.end(), [](const auto& t) { return t.is_string(); }),
              "'{}': target_modules is {}; tidal reads a list of module names", path.string(), theirs.dump());
  const std::vector<std::string> ours = models::lora_targets(cfg.model, f.lora_targets);
  const std::set<std::string> a(theirs.begin(), theirs.end()), b(ours.begin(), ours.end());
  TIDAL_CHECK(a == b, "'{}': the adapters target {}, and finetune.lora_targets gives {}: set "
              "finetune.lora_targets = \"{}\"", path.string(), fmt::join(a, ","), fmt::join(b, ","),
              fmt::join(a, ","));
}

}  // namespace

std::unique_ptr<models::Model> build_model(const config::Config& cfg, nn::LayerFactory& layers) {
  auto model = models::make_model(cfg.model, config::checkpoint_policy(cfg.train), layers,
                                  cfg.memory.embedding_on_host);
  if (const std::optional<models::LoraSpec> lora = config::lora_spec(cfg))
    models::attach_lora(*model, cfg.model, *lora);
  return model;
}

HeldBase hold_frozen_base(const config::Config& cfg, std::span<nn::Parameter* const> frozen, int rank) {
  const std::set<std::string> quantized =
      cfg.finetune.base_dtype == config::BaseDType::nf4 ? models::linear_weights(cfg.model) : std::set<std::string>{};
  HeldBase held;
  std::optional<HfLoadReport>& loaded = held.loaded;
  const config::BaseOffload where = cfg.finetune.base_offload;
  if (where == config::BaseOffload::disk) {
    std::int64_t bytes = 0;
    for (const nn::Parameter* p : frozen)
      bytes += quantized.count(p->name) ? ops::nf4_bytes(p->shape.numel())
                                        : p->shape.numel() * std::int64_t(dtype_size(cfg.train.precision));
    held.stream = std::make_unique<memory::FrozenBaseStream>(cfg.memory.disk_dir, rank, bytes);
  }
  Allocator& tier = where == config::BaseOffload::host ? host_tier(cfg) : device_tier(cfg);
  if (!cfg.model.init_from.empty()) loaded.emplace().rss_before_bytes = resident_bytes();
  for (nn::Parameter* p : frozen) {
    if (loaded) p->data = Tensor::empty(p->shape, cfg.train.precision, host_allocator());  // the file's values
    else nn::materialize(*p, cfg.train.seed, host_allocator(), cfg.train.precision);
    if (loaded) {
      const HfLoadReport r = load_hf_weights(cfg.model.init_from, cfg.model, {&p, 1});
      loaded->tensors += r.tensors;
      loaded->file_bytes = r.file_bytes;
      loaded->copied_bytes += r.copied_bytes;
      loaded->seconds += r.seconds;
      loaded->peak_rss_bytes = std::max(loaded->peak_rss_bytes, r.peak_rss_bytes);
    }
    if (quantized.count(p->name)) {
      p->nf4 = std::make_shared<const ops::Nf4Weight>(ops::nf4_quantize(p->data));
      p->data = Tensor();
    }
    if (held.stream) {
      held.stream->store(*p);  // into the file; the host copy goes
    } else if (p->nf4) {
      p->nf4 = std::make_shared<const ops::Nf4Weight>(p->nf4->to(tier));
    } else {
      p->data = p->data.clone(tier);
    }
  }
  if (where == config::BaseOffload::host) held.stream = std::make_unique<memory::FrozenBaseStream>(frozen);
  return held;
}

std::int64_t frozen_base_bytes(std::span<nn::Parameter* const> frozen) {
  std::int64_t bytes = 0;
  for (const nn::Parameter* p : frozen) bytes += p->nf4 ? p->nf4->bytes() : std::int64_t(p->data.nbytes());
  return bytes;
}

std::string load_peft_adapters(const std::string& dir, const config::Config& cfg,
                               std::span<nn::Parameter* const> params) {
  check_adapter_config(dir, cfg);
  const fs::path file = fs::path(dir) / "adapter_model.safetensors";
  TIDAL_CHECK(fs::exists(file), "finetune.adapters_from = \"{}\": no adapter_model.safetensors there", dir);
  const io::SafetensorsReader reader(file.string());
  std::map<std::string, io::HfTensorSource> by_name;
  for (io::HfTensorSource& s :
       models::lora_hf_tensors(cfg.model, models::lora_targets(cfg.model, cfg.finetune.lora_targets),
                               cfg.finetune.lora_rank))
    by_name.emplace(s.tidal_name, std::move(s));
  std::size_t filled = 0;
  for (nn::Parameter* p : params) {
    const auto found = by_name.find(p->name);
    if (found == by_name.end()) continue;  // not an adapter
    const io::HfTensorSource& src = found->second;
    const std::string& name = src.hf_names.front();
    const auto entry = reader.entries().find(name);
    TIDAL_CHECK(entry != reader.entries().end(), "'{}' has no tensor '{}', which adapters of {} on this model have",
                file.string(), name, cfg.finetune.lora_targets);
    TIDAL_CHECK(entry->second.dtype != DType::i32 && entry->second.dtype != DType::u8,
                "'{}': tensor '{}' is {}; adapters are F32, BF16 or F16", file.string(), name,
                dtype_name(entry->second.dtype));
    TIDAL_CHECK(entry->second.shape == src.hf_shapes.front(), "'{}': tensor '{}' is {} but these adapters make it {}",
                file.string(), name, entry->second.shape.str(), src.hf_shapes.front().str());
    copy_from_hf(*p, src, {reader.view(name)});
    ++filled;
  }
  return fmt::format("adapters: {} tensors from {}", filled, dir);
}

std::unique_ptr<models::Model> load_adapted_model(CheckpointReader& reader) {
  const config::Config cfg = reader.stored_config();
  TIDAL_ASSERT(cfg.finetune.method == config::FinetuneMethod::lora, "{} holds no adapters", reader.step_dir());
  auto model = build_model(cfg, nn::single_device_layers());
  model->materialize(cfg.train.seed);
  std::vector<nn::Parameter*> base, adapters;
  for (nn::Parameter* p : model->parameters()) (p->frozen ? base : adapters).push_back(p);
  if (!cfg.model.init_from.empty()) {
    TIDAL_CHECK(fs::is_directory(cfg.model.init_from),
                "'{}' holds LoRA adapters on the base model.init_from = \"{}\", which is not there any more: put the "
                "base back there", reader.step_dir(), cfg.model.init_from);
    load_hf_weights(cfg.model.init_from, cfg.model, base);
  }
  for (nn::Parameter* p : adapters) reader.read_block(p->name, *p, p->data);
  return model;
}

HfExportReport export_peft(const std::string& checkpoint, const std::string& out_dir) {
  CheckpointReader reader(checkpoint);
  const config::Config cfg = reader.stored_config();
  TIDAL_CHECK(cfg.finetune.method == config::FinetuneMethod::lora,
              "'{}' was trained in full (finetune.method = \"full\"): it has no adapters for --format peft; export "
              "the model with --format hf", reader.step_dir());
  const config::FinetuneConfig& f = cfg.finetune;
  const std::vector<std::string> targets = models::lora_targets(cfg.model, f.lora_targets);
  const WholeTensor whole{
      .shape = [&](const std::string& name) {
        TIDAL_CHECK(reader.has(name), "'{}' has no adapter tensor '{}'", reader.step_dir(), name);
        return reader.metadata().tensors.at(name).shape;
      },
      .read = [&](const std::string& name, Allocator& memory) { return reader.read_whole(name, memory); }};
  HfExportReport report =
      write_hf_tensors(models::lora_hf_tensors(cfg.model, targets, f.lora_rank), whole, out_dir,
                       {.stem = "adapter_model", .max_shard_bytes = ~std::uint64_t(0)}, nullptr);
  const models::HfAdapter& hf = models::hf_adapter(cfg.model);
  report.architecture = "PEFT LoRA on " + hf.architecture;
  // PEFT 0.11's LoraConfig, as its save_pretrained writes it.
  const nlohmann::json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", cfg.model.init_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(cfg.model.init_from)},
      {"r", f.lora_rank},
      {"lora_alpha", f.lora_alpha},
      {"lora_dropout", f.lora_dropout},
      {"target_modules", targets},
      {"fan_in_fan_out", hf.model_type == "gpt2"},
      {"bias", "none"},
      {"use_rslora", false},
      {"use_dora", false},
      {"modules_to_save", nullptr},
      {"init_lora_weights", true},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()},
      {"inference_mode", true},
      {"revision", nullptr}};
  write_text_file((fs::path(out_dir) / "adapter_config.json").string(), config.dump(2) + "\n");
  return report;
}

}  // namespace tidal::engine
