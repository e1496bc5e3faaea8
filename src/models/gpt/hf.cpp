#include "models/gpt/hf.h"

#include "models/gpt/family.h"

#include <fmt/format.h>

namespace tidal::models {
namespace {

std::vector<std::string> gpt_from_hf(const io::HfConfigKeys& k, ModelConfig& m) {
  m.n_layer = k.positive<int>("n_layer", 12);
  m.n_head = k.positive<int>("n_head", 12);
  m.n_embd = k.positive<std::int64_t>("n_embd", 768);
  m.vocab_size = k.positive<std::int64_t>("vocab_size", 50257);
  m.ln_eps = k.get<double>("layer_norm_epsilon", 1e-5);
  const GptKeys g{.max_positions = k.positive<std::int64_t>("n_positions", 1024),
                  .activation = k.gelu_erf("activation_function", "gelu_new") ? ops::GeluForm::erf : ops::GeluForm::tanh,
                  .tie_embeddings = k.get<bool>("tie_word_embeddings", true)};
  k.require_mlp_width("n_inner", m.n_embd);
  k.require("scale_attn_weights", true, "attention scaled by 1/sqrt(head size)");
  k.require("scale_attn_by_inverse_layer_idx", false, "attention scaled by 1/sqrt(head size)");
  k.require("reorder_and_upcast_attn", false, "attention computed in fp32 accumulation anyway");
  k.require("add_cross_attention", false, "decoder-only blocks");
  std::vector<std::string> decided = {"model.n_layer", "model.n_head", "model.n_embd", "model.ln_eps",
                                      "model.vocab_size"};
  for (std::string& name : gpt_key_table().write(g, m.family_keys)) decided.push_back(std::move(name));
  return decided;
}

nlohmann::json gpt_to_hf(const ModelConfig& m) {
  const GptKeys g = gpt_keys(m);
  const std::int64_t positions = g.max_positions ? g.max_positions : m.seq_len;
  return {{"model_type", "gpt2"},
          {"n_layer", m.n_layer},
          {"n_head", m.n_head},
          {"n_embd", m.n_embd},
          {"vocab_size", m.vocab_size},
          {"n_positions", positions},
          {"n_ctx", positions},
          {"n_inner", nullptr},
          {"layer_norm_epsilon", norm_eps(m)},
          {"activation_function", g.activation == ops::GeluForm::erf ? "gelu" : "gelu_new"},
          {"tie_word_embeddings", g.tie_embeddings},
          {"resid_pdrop", m.dropout},
          {"embd_pdrop", m.dropout},
          {"attn_pdrop", 0.0}};
}

std::vector<io::HfTensorSource> tensors(const ModelConfig& m) {
  const std::int64_t C = m.n_embd;
  const GptKeys g = gpt_keys(m);
  io::HfTensorSources src;
  src.one("wte.weight", "transformer.wte.weight", {m.vocab_size, C});
  src.one("wpe.weight", "transformer.wpe.weight", {g.max_positions ? g.max_positions : m.seq_len, C});
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string t = fmt::format("blocks.{}.", i), h = fmt::format("transformer.h.{}.", i);
    src.layer_norm(t + "ln_1", h + "ln_1", C);
    src.linear(t + "attn.qkv", h + "attn.c_attn", C, 3 * C, true);
    src.linear(t + "attn.proj", h + "attn.c_proj", C, C, true);
    src.layer_norm(t + "ln_2", h + "ln_2", C);
    src.linear(t + "mlp.fc", h + "mlp.c_fc", C, 4 * C, true);
    src.linear(t + "mlp.proj", h + "mlp.c_proj", 4 * C, C, true);
  }
  src.layer_norm("ln_f", "transformer.ln_f", C);
  if (!g.tie_embeddings) src.one("lm_head.weight", "lm_head.weight", {m.vocab_size, C});
  return src.take();
}

}  // namespace

HfAdapter gpt2_hf_adapter() {
  return {.model_type = "gpt2",
          .architecture = "GPT2LMHeadModel",
          .base_prefix = "transformer.",
          .read = gpt_from_hf,
          .write = gpt_to_hf,
          .tensors = tensors,
          // The causal mask buffers older versions saved.
          .ignored_on_load = [](const std::string& n) {
            return n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias");
          }};
}

}  // namespace tidal::models
