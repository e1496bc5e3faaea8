#include "models/vit/hf.h"

#include "models/vit/family.h"

#include <fmt/format.h>

namespace tidal::models {
namespace {

std::vector<std::string> vit_from_hf(const io::HfConfigKeys& k, ModelConfig& m) {
  m.n_layer = k.positive<int>("num_hidden_layers", 12);
  m.n_head = k.positive<int>("num_attention_heads", 12);
  m.n_embd = k.positive<std::int64_t>("hidden_size", 768);
  m.ln_eps = k.get<double>("layer_norm_eps", 1e-12);
  // transformers keeps the label count as id2label (default: two labels).
  const nlohmann::json& j = k.json();
  const VitKeys v{.activation = k.gelu_erf("hidden_act", "gelu") ? ops::GeluForm::erf : ops::GeluForm::tanh,
                  .image_size = k.positive<std::int64_t>("image_size", 224),
                  .patch_size = k.positive<std::int64_t>("patch_size", 16),
                  .channels = k.positive<std::int64_t>("num_channels", 3),
                  .num_classes = j.contains("id2label") && j["id2label"].is_object()
                                     ? std::int64_t(j["id2label"].size())
                                     : 2};
  k.require_mlp_width("intermediate_size", m.n_embd);
  k.require("qkv_bias", true, "q, k and v with biases");
  std::vector<std::string> decided = {"model.n_layer", "model.n_head", "model.n_embd", "model.ln_eps"};
  for (std::string& name : vit_key_table().write(v, m.family_keys)) decided.push_back(std::move(name));
  return decided;
}

nlohmann::json vit_to_hf(const ModelConfig& m) {
  const VitKeys v = vit_keys(m);
  nlohmann::json labels = nlohmann::json::object(), ids = nlohmann::json::object();
  for (std::int64_t i = 0; i < v.num_classes; ++i) {
    labels[std::to_string(i)] = fmt::format("LABEL_{}", i);
    ids[fmt::format("LABEL_{}", i)] = i;
  }
  return {{"model_type", "vit"},
          {"num_hidden_layers", m.n_layer},
          {"num_attention_heads", m.n_head},
          {"hidden_size", m.n_embd},
          {"intermediate_size", 4 * m.n_embd},
          {"image_size", v.image_size},
          {"patch_size", v.patch_size},
          {"num_channels", v.channels},
          {"layer_norm_eps", norm_eps(m)},
          {"hidden_act", v.activation == ops::GeluForm::erf ? "gelu" : "gelu_new"},
          {"qkv_bias", true},
          {"id2label", labels},
          {"label2id", ids},
          {"hidden_dropout_prob", m.dropout},
          {"attention_probs_dropout_prob", 0.0}};
}

std::vector<io::HfTensorSource> tensors(const ModelConfig& m) {
  const VitKeys v = vit_keys(m);
  const std::int64_t C = m.n_embd, P = v.patch_size, n = (v.image_size / P) * (v.image_size / P);
  io::HfTensorSources src;
  src.one("patch.weight", "vit.embeddings.patch_embeddings.projection.weight", {C, v.channels, P, P});
  src.one("patch.bias", "vit.embeddings.patch_embeddings.projection.bias", {C});
  src.one("cls_token", "vit.embeddings.cls_token", {1, 1, C});
  src.one("pos_embed", "vit.embeddings.position_embeddings", {1, n + 1, C});
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string t = fmt::format("blocks.{}.", i), h = fmt::format("vit.encoder.layer.{}.", i);
    src.layer_norm(t + "ln_1", h + "layernorm_before", C);
    src.qkv(t + "attn.qkv", h + "attention.attention", C);
    src.linear(t + "attn.proj", h + "attention.output.dense", C, C, false);
    src.layer_norm(t + "ln_2", h + "layernorm_after", C);
    src.linear(t + "mlp.fc", h + "intermediate.dense", C, 4 * C, false);
    src.linear(t + "mlp.proj", h + "output.dense", 4 * C, C, false);
  }
  src.layer_norm("ln_f", "vit.layernorm", C);
  src.linear("head", "classifier", C, v.num_classes, false);
  return src.take();
}

}  // namespace

HfAdapter vit_hf_adapter() {
  return {.model_type = "vit",
          .architecture = "ViTForImageClassification",
          .base_prefix = "vit.",
          .read = vit_from_hf,
          .write = vit_to_hf,
          .tensors = tensors};
}

}  // namespace tidal::models
