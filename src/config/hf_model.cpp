#include "config/hf_model.h"

#include "config/model_types.h"
#include "config/schema.h"
#include "core/error.h"

namespace tidal::config {
namespace {

const char* model_type(io::HfFamily f) {
  switch (f) {
    case io::HfFamily::gpt2: return "gpt";
    case io::HfFamily::bert: return "bert";
    case io::HfFamily::vit: return "vit";
    case io::HfFamily::llama: return "llama";
  }
  return "?";
}

}  // namespace

double effective_ln_eps(const ModelConfig& m) {
  if (m.ln_eps > 0) return m.ln_eps;
  return m.type == "bert" ? 1e-12 : m.type == "vit" || m.type == "llama" ? 1e-6 : 1e-5;
}

std::int64_t effective_intermediate_size(const ModelConfig& m) {
  if (m.intermediate_size > 0) return m.intermediate_size;
  return (2 * (4 * m.n_embd) / 3 + 255) / 256 * 256;
}

void apply_init_from(Config& cfg, const SetBy& set_by) {
  const std::string dir = cfg.model.init_from;
  const io::HfModelSpec s = io::read_hf_config(dir);
  // The keys the directory decides, with its values.
  std::vector<std::pair<std::string, Value>> from_file{
      {"model.type", std::string(model_type(s.family))},
      {"model.n_layer", std::int64_t(s.n_layer)},
      {"model.n_head", std::int64_t(s.n_head)},
      {"model.n_embd", s.n_embd},
      {"model.ln_eps", s.ln_eps}};
  if (s.family != io::HfFamily::llama)
    from_file.emplace_back("model.activation", std::string(s.gelu_erf ? "gelu_erf" : "gelu_tanh"));
  if (s.family == io::HfFamily::vit) {
    from_file.insert(from_file.end(), {{"model.image_size", s.image_size},
                                       {"model.patch_size", s.patch_size},
                                       {"model.channels", s.channels},
                                       {"model.num_classes", s.num_classes}});
  } else {
    from_file.insert(from_file.end(), {{"model.vocab_size", s.vocab_size},
                                       {"model.max_positions", s.max_positions},
                                       {"model.tie_embeddings", s.tie_embeddings}});
    if (s.family == io::HfFamily::bert) from_file.emplace_back("model.type_vocab_size", s.type_vocab_size);
    if (s.family == io::HfFamily::llama)
      from_file.insert(from_file.end(), {{"model.n_kv_head", std::int64_t(s.n_kv_head)},
                                         {"model.intermediate_size", s.intermediate_size},
                                         {"model.rope_theta", s.rope_theta},
                                         {"model.rope_scaling_factor", s.rope_scaling_factor},
                                         {"model.rope_low_freq_factor", s.rope_low_freq_factor},
                                         {"model.rope_high_freq_factor", s.rope_high_freq_factor},
                                         {"model.rope_original_max_positions", s.rope_original_max_positions},
                                         {"model.attention_bias", s.attention_bias}});
  }
  for (const auto& [name, value] : from_file) {
    const Key& key = *find_key(name);
    const auto given = set_by.find(name);
    if (given != set_by.end()) {
      const Value mine = key.get(cfg);
      const bool same = std::holds_alternative<double>(mine)
                            ? std::abs(std::get<double>(mine) - std::get<double>(value)) <= 1e-6 * std::abs(std::get<double>(value))
                            : mine == value;
      TIDAL_CHECK(same, "{} = {} ({}) contradicts model.init_from's {}/config.json, which gives {}: leave {} unset "
                  "(the directory decides it)", name, format_value(mine), given->second, dir, format_value(value),
                  name);
    }
    key.set(cfg, value);
  }
  if (!set_by.count("model.seq_len") && cfg.model.seq_len > cfg.model.max_positions && s.family != io::HfFamily::vit)
    cfg.model.seq_len = cfg.model.max_positions;
}

io::HfModelSpec hf_spec(const ModelConfig& m) {
  TIDAL_CHECK(builtin_model_type(m.type),
              "model.type = \"{}\" is a model of your own: Hugging Face checkpoints (model.init_from, tidal export "
              "--format hf) are GPT-2, BERT, ViT and Llama directories", m.type);
  io::HfModelSpec s;
  s.family = m.type == "bert"    ? io::HfFamily::bert
             : m.type == "vit"   ? io::HfFamily::vit
             : m.type == "llama" ? io::HfFamily::llama
                                 : io::HfFamily::gpt2;
  s.n_layer = m.n_layer;
  s.n_head = m.n_head;
  s.n_embd = m.n_embd;
  s.vocab_size = m.vocab_size;
  s.max_positions = m.max_positions ? m.max_positions : m.seq_len;
  s.type_vocab_size = m.type_vocab_size;
  s.ln_eps = effective_ln_eps(m);
  s.gelu_erf = m.activation == ops::GeluForm::erf;
  s.tie_embeddings = m.type != "vit" && m.tie_embeddings;
  s.image_size = m.image_size;
  s.patch_size = m.patch_size;
  s.channels = m.channels;
  s.num_classes = m.num_classes;
  s.dropout = m.dropout;
  s.n_kv_head = m.n_kv_head ? m.n_kv_head : m.n_head;
  s.intermediate_size = effective_intermediate_size(m);
  s.rope_theta = m.rope_theta;
  s.rope_scaling_factor = m.rope_scaling_factor;
  s.rope_low_freq_factor = m.rope_low_freq_factor;
  s.rope_high_freq_factor = m.rope_high_freq_factor;
  s.rope_original_max_positions = m.rope_original_max_positions;
  s.attention_bias = m.attention_bias;
  return s;
}

}  // namespace tidal::config
