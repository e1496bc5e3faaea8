#include "models/lora.h"

#include "core/error.h"
#include "models/registry.h"
#include "ops/gemm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

namespace tidal::models {
namespace {

// "model.layers.0.self_attn.q_proj.weight" -> "q_proj": the Hugging Face module a weight belongs to.
std::string hf_module(const std::string& weight_name) {
  const std::size_t end = weight_name.rfind('.');
  const std::size_t begin = weight_name.rfind('.', end - 1);
  return weight_name.substr(begin + 1, end - begin - 1);
}

// Whether Hugging Face's module `name` (of a 2-D weight) is a linear layer: not an embedding table
// (embed_tokens, word_embeddings, GPT-2's wte and wpe), not the LM head.
bool is_linear(const std::string& name) {
  return name.find("embed") == std::string::npos && name != "wte" && name != "wpe" && name != "lm_head";
}

// The module that reads `weight` itself (the linear, not a block above it).
nn::Module* user_of(nn::Module& root, const nn::Parameter& weight) {
  const std::vector<nn::Parameter*> used = root.used_parameters();
  if (std::find(used.begin(), used.end(), &weight) != used.end()) return &root;
  for (auto& [name, child] : root.children())
    if (nn::Module* m = user_of(*child, weight)) return m;
  return nullptr;
}

}  // namespace

std::vector<std::string> lora_targets(const ModelConfig& m, const std::string& text) {
  std::vector<std::string> out;
  std::string name;
  for (char c : text + ",") {
    if (c == ',' || c == ' ') {
      if (!name.empty()) out.push_back(std::move(name));
      name.clear();
    } else {
      name += c;
    }
  }
  if (!out.empty()) return out;
  const std::string type = hf_adapter(m).model_type;
  if (type == "gpt2") return {"c_attn"};
  if (type == "bert" || type == "vit") return {"query", "value"};
  return {"q_proj", "v_proj"};
}

namespace {

// A base linear of the family's Hugging Face layout with the blocks of its rows that `targets` name.
struct AdaptedLinear {
  const io::HfTensorSource* base;
  std::vector<nn::LoraTarget> blocks;
  std::vector<std::size_t> hf_index;  // each block's tensor in base->hf_names
};

// The family's linears that `targets` adapt; a target naming none of them is an error listing them.
std::vector<AdaptedLinear> adapted_linears(const ModelConfig& m, const std::vector<io::HfTensorSource>& sources,
                                           const std::vector<std::string>& targets) {
  std::set<std::string> linears, found;
  std::vector<AdaptedLinear> out;
  for (const io::HfTensorSource& s : sources) {
    if (!s.tidal_name.ends_with(".weight") || s.hf_shapes.front().size() != 2) continue;
    AdaptedLinear a{.base = &s, .blocks = {}, .hf_index = {}};
    std::int64_t row = 0;
    for (std::size_t j = 0; j < s.hf_names.size(); ++j) {
      const std::string name = hf_module(s.hf_names[j]);
      const std::int64_t rows = s.hf_shapes[j][s.transposed ? 1 : 0];
      if (is_linear(name)) linears.insert(name);
      if (std::find(targets.begin(), targets.end(), name) != targets.end()) {
        a.blocks.push_back({.name = name, .first_row = row, .rows = rows});
        a.hf_index.push_back(j);
        found.insert(name);
      }
      row += rows;
    }
    if (!a.blocks.empty()) out.push_back(std::move(a));
  }
  for (const std::string& t : targets)
    TIDAL_CHECK(found.count(t), "finetune.lora_targets: \"{}\" is none of a {} model's linears ({})", t,
                hf_adapter(m).model_type, fmt::join(linears, ", "));
  return out;
}

std::int64_t in_features(const io::HfTensorSource& s) { return s.hf_shapes.front()[s.transposed ? 0 : 1]; }

}  // namespace

std::set<std::string> linear_weights(const ModelConfig& m) {
  std::set<std::string> out;
  for (const io::HfTensorSource& s : hf_adapter(m).tensors(m))
    if (s.tidal_name.ends_with(".weight") && s.hf_shapes.front().size() == 2 && is_linear(hf_module(s.hf_names.front())))
      out.insert(s.tidal_name);
  return out;
}

std::vector<io::HfTensorSource> lora_hf_tensors(const ModelConfig& m, const std::vector<std::string>& targets,
                                                int rank) {
  const std::vector<io::HfTensorSource> sources = hf_adapter(m).tensors(m);
  std::vector<io::HfTensorSource> out;
  for (const AdaptedLinear& a : adapted_linears(m, sources, targets)) {
    const std::string path = a.base->tidal_name.substr(0, a.base->tidal_name.rfind('.')) + ".lora.";
    for (std::size_t i = 0; i < a.blocks.size(); ++i) {
      const std::string& hf = a.base->hf_names[a.hf_index[i]];
      const std::string peft = "base_model.model." + hf.substr(0, hf.rfind('.'));
      out.push_back({.tidal_name = path + a.blocks[i].name + ".A",
                     .hf_names = {peft + ".lora_A.weight"},
                     .hf_shapes = {{rank, in_features(*a.base)}}});
      io::HfTensorSource b{.tidal_name = path + a.blocks[i].name + ".B",
                           .hf_names = {peft + ".lora_B.weight"},
                           .hf_shapes = {{a.blocks[i].rows, rank}}};
      if (a.hf_index[i] == 0 && a.base->query_heads) {  // the query block: its heads as the base's
        b.query_heads = a.base->query_heads;
        b.kv_heads = a.base->kv_heads;
      }
      out.push_back(std::move(b));
    }
  }
  return out;
}

std::vector<nn::LowRankAdapter*> attach_lora(Model& model, const ModelConfig& m, const LoraSpec& spec) {
  const std::vector<io::HfTensorSource> sources = hf_adapter(m).tensors(m);
  model.assign_names("");  // the linears are found by their weights' names
  std::vector<nn::LowRankAdapter*> adapters;
  std::map<std::string, const nn::Parameter*> held;  // under expert parallelism, this rank's experts only
  for (const nn::Parameter* p : model.parameters()) held.emplace(p->name, p);
  for (AdaptedLinear& a : adapted_linears(m, sources, spec.targets)) {
    const auto found = held.find(a.base->tidal_name);
    if (found == held.end()) continue;  // another rank's expert
    const nn::Parameter& w = *found->second;
    nn::Module* linear = user_of(model, w);
    TIDAL_ASSERT(linear != nullptr, "{}: no module reads {}", m.type, w.name);
    TIDAL_ASSERT(w.shape.size() == 2, "{}: {}", w.name, w.shape.str());
    auto adapter = std::make_unique<nn::LowRankAdapter>(w, std::move(a.blocks), spec.options, linear->adapter_split());
    adapters.push_back(adapter.get());
    linear->attach_adapter(std::move(adapter));
  }
  std::set<const nn::Parameter*> trained;
  for (nn::LowRankAdapter* a : adapters)
    for (const nn::Parameter* p : a->parameters()) trained.insert(p);
  for (nn::Parameter* p : model.parameters()) p->frozen = !trained.count(p);
  return adapters;
}

void merge_lora(Model& model) {
  const auto visit = [](auto& self, nn::Module& m) -> void {
    if (auto* adapter = dynamic_cast<nn::LowRankAdapter*>(m.adapter())) {
      const std::vector<nn::Parameter*> used = m.used_parameters();
      const auto w = std::find_if(used.begin(), used.end(), [](const nn::Parameter* p) { return p->local_name == "weight"; });
      TIDAL_ASSERT(w != used.end(), "{}: an adapter on a module without a weight", m.path());
      for (std::size_t i = 0; i < adapter->targets().size(); ++i) {
        const nn::LoraTarget& t = adapter->targets()[i];
        Tensor block = (*w)->data.slice(0, t.first_row, t.first_row + t.rows);
        ops::gemm(block, adapter->b(i).data, adapter->a(i).data, {.alpha = adapter->scale(), .beta = 1.0f});
      }
    }
    for (auto& [name, child] : m.children()) self(self, *child);
  };
  visit(visit, model);
}

}  // namespace tidal::models
