#include "models/llama/hf.h"

#include "models/registry.h"

#include <fmt/format.h>

namespace tidal::models {
namespace {

// transformers' LlamaConfig (4.40): its shape, attention_bias and rope_scaling as Llama 3.1 writes it.
std::vector<std::string> llama_from_hf(const io::HfConfigKeys& k, ModelConfig& m) {
  LlamaKeys l;
  std::vector<std::string> decided = read_llama_shape(k, m, l, {});
  l.attention_bias = k.get<bool>("attention_bias", false);
  k.require("mlp_bias", false, "an MLP without biases");
  if (k.has("rope_scaling")) {
    const io::HfConfigKeys r = k.object("rope_scaling");
    const std::string type = r.get<std::string>("rope_type", r.get<std::string>("type", ""));
    TIDAL_CHECK(type == "llama3", "{}: rope_scaling type \"{}\"; tidal builds Llama 3's (\"llama3\") only", k.file(),
                type);
    l.rope_scaling_factor = r.get<double>("factor", 8.0);
    l.rope_low_freq_factor = r.get<double>("low_freq_factor", 1.0);
    l.rope_high_freq_factor = r.get<double>("high_freq_factor", 4.0);
    l.rope_original_max_positions = r.positive<std::int64_t>("original_max_position_embeddings", 8192);
  }
  for (std::string& name : llama_key_table().write(l, m.family_keys)) decided.push_back(std::move(name));
  return decided;
}

nlohmann::json llama_to_hf(const ModelConfig& m) {
  const LlamaKeys l = llama_keys(m);
  nlohmann::json j = llama_shape_json(m);
  j.update({{"model_type", "llama"},
            {"attention_bias", l.attention_bias},
            {"pretraining_tp", 1},
            {"rope_scaling", nullptr}});
  if (l.rope_scaling_factor > 0)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", l.rope_scaling_factor},
                         {"low_freq_factor", l.rope_low_freq_factor},
                         {"high_freq_factor", l.rope_high_freq_factor},
                         {"original_max_position_embeddings", l.rope_original_max_positions}};
  return j;
}

}  // namespace

std::vector<std::string> read_llama_shape(const io::HfConfigKeys& k, ModelConfig& m, LlamaKeys& l,
                                          const LlamaHfDefaults& d) {
  m.n_layer = k.positive<int>("num_hidden_layers", d.n_layer);
  m.n_head = k.positive<int>("num_attention_heads", d.n_head);
  m.n_embd = k.positive<std::int64_t>("hidden_size", d.n_embd);
  l.n_kv_head = k.positive<int>("num_key_value_heads", m.n_head);
  l.intermediate_size = k.positive<std::int64_t>("intermediate_size", d.intermediate_size);
  m.vocab_size = k.positive<std::int64_t>("vocab_size", d.vocab_size);
  l.max_positions = k.positive<std::int64_t>("max_position_embeddings", d.max_positions);
  m.ln_eps = k.get<double>("rms_norm_eps", 1e-6);
  l.tie_embeddings = k.get<bool>("tie_word_embeddings", false);
  l.rope_theta = k.get<double>("rope_theta", 10000.0);
  k.require<std::string>("hidden_act", "silu", "a SwiGLU MLP");
  const std::int64_t head_dim = k.get<std::int64_t>("head_dim", m.n_embd / m.n_head);
  TIDAL_CHECK(head_dim == m.n_embd / m.n_head && m.n_embd % m.n_head == 0, "{}: \"head_dim\" is {}; tidal's heads are "
              "hidden_size / num_attention_heads = {}", k.file(), head_dim, m.n_embd / m.n_head);
  return {"model.n_layer", "model.n_head", "model.n_embd", "model.ln_eps", "model.vocab_size"};
}

nlohmann::json llama_shape_json(const ModelConfig& m) {
  const LlamaKeys l = llama_keys(m);
  return {{"num_hidden_layers", m.n_layer},
          {"num_attention_heads", m.n_head},
          {"num_key_value_heads", l.n_kv_head ? l.n_kv_head : m.n_head},
          {"hidden_size", m.n_embd},
          {"intermediate_size", llama_intermediate_size(m)},
          {"vocab_size", m.vocab_size},
          {"max_position_embeddings", llama_context(m)},
          {"rms_norm_eps", norm_eps(m)},
          {"hidden_act", "silu"},
          {"rope_theta", l.rope_theta},
          {"attention_dropout", 0.0},
          {"tie_word_embeddings", l.tie_embeddings}};
}

void llama_hf_mlp(io::HfTensorSources& src, const std::string& tidal, const std::string& hf, std::int64_t n_embd,
                  std::int64_t width, const std::string& hf_mlp) {
  const std::string h = hf + hf_mlp;
  src.add(tidal + "fc.weight", {h + "gate_proj.weight", h + "up_proj.weight"}, {{width, n_embd}, {width, n_embd}});
  src.one(tidal + "proj.weight", h + "down_proj.weight", {n_embd, width});
}

std::vector<io::HfTensorSource> llama_hf_tensors(const ModelConfig& m, bool qkv_bias, bool proj_bias,
                                                 const HfMlpTensors& mlp) {
  const LlamaKeys l = llama_keys(m);
  const std::int64_t C = m.n_embd, I = llama_intermediate_size(m), hd = m.n_embd / m.n_head;
  const int kv = l.n_kv_head ? l.n_kv_head : m.n_head;
  io::HfTensorSources src;
  src.one("wte.weight", "model.embed_tokens.weight", {m.vocab_size, C});
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string t = fmt::format("blocks.{}.", i), h = fmt::format("model.layers.{}.", i);
    src.one(t + "ln_1.weight", h + "input_layernorm.weight", {C});
    src.grouped_qkv(t + "attn.qkv", h + "self_attn.", m.n_head, kv, hd, "weight", C);
    if (qkv_bias) src.grouped_qkv(t + "attn.qkv", h + "self_attn.", m.n_head, kv, hd, "bias", 0);
    src.one(t + "attn.proj.weight", h + "self_attn.o_proj.weight", {C, C});
    if (proj_bias) src.one(t + "attn.proj.bias", h + "self_attn.o_proj.bias", {C});
    src.one(t + "ln_2.weight", h + "post_attention_layernorm.weight", {C});
    if (mlp) mlp(src, t + "mlp.", h);
    else llama_hf_mlp(src, t + "mlp.", h, C, I);
  }
  src.one("ln_f.weight", "model.norm.weight", {C});
  if (!l.tie_embeddings) src.one("lm_head.weight", "lm_head.weight", {m.vocab_size, C});
  return src.take();
}

HfAdapter llama_hf_adapter() {
  return {.model_type = "llama",
          .architecture = "LlamaForCausalLM",
          .base_prefix = "model.",
          .read = llama_from_hf,
          .write = llama_to_hf,
          .tensors = [](const ModelConfig& m) {
            const bool bias = llama_keys(m).attention_bias;
            return llama_hf_tensors(m, bias, bias);
          },
          // Older checkpoints saved the rotary embedding's inverse frequencies, a buffer.
          .ignored_on_load = [](const std::string& n) { return n.ends_with(".rotary_emb.inv_freq"); }};
}

}  // namespace tidal::models
