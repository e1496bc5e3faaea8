#include "models/bert/hf.h"

#include "models/bert/family.h"

#include <fmt/format.h>

namespace tidal::models {
namespace {

std::vector<std::string> bert_from_hf(const io::HfConfigKeys& k, ModelConfig& m) {
  m.n_layer = k.positive<int>("num_hidden_layers", 12);
  m.n_head = k.positive<int>("num_attention_heads", 12);
  m.n_embd = k.positive<std::int64_t>("hidden_size", 768);
  m.vocab_size = k.positive<std::int64_t>("vocab_size", 30522);
  m.ln_eps = k.get<double>("layer_norm_eps", 1e-12);
  BertKeys b;
  b.max_positions = k.positive<std::int64_t>("max_position_embeddings", 512);
  b.type_vocab_size = k.positive<std::int64_t>("type_vocab_size", 2);
  b.activation = k.gelu_erf("hidden_act", "gelu") ? ops::GeluForm::erf : ops::GeluForm::tanh;
  b.tie_embeddings = k.get<bool>("tie_word_embeddings", true);
  k.require_mlp_width("intermediate_size", m.n_embd);
  k.require<std::string>("position_embedding_type", "absolute", "learned absolute positions");
  k.require("is_decoder", false, "an encoder");
  std::vector<std::string> decided = {"model.n_layer", "model.n_head", "model.n_embd", "model.ln_eps",
                                      "model.vocab_size"};
  for (std::string& name : bert_key_table().write(b, m.family_keys)) decided.push_back(std::move(name));
  return decided;
}

nlohmann::json bert_to_hf(const ModelConfig& m) {
  const BertKeys b = bert_keys(m);
  return {{"model_type", "bert"},
          {"num_hidden_layers", m.n_layer},
          {"num_attention_heads", m.n_head},
          {"hidden_size", m.n_embd},
          {"intermediate_size", 4 * m.n_embd},
          {"vocab_size", m.vocab_size},
          {"max_position_embeddings", b.max_positions ? b.max_positions : m.seq_len},
          {"type_vocab_size", b.type_vocab_size},
          {"layer_norm_eps", norm_eps(m)},
          {"hidden_act", b.activation == ops::GeluForm::erf ? "gelu" : "gelu_new"},
          {"position_embedding_type", "absolute"},
          {"tie_word_embeddings", b.tie_embeddings},
          {"hidden_dropout_prob", m.dropout},
          {"attention_probs_dropout_prob", 0.0}};
}

std::vector<io::HfTensorSource> tensors(const ModelConfig& m) {
  const std::int64_t C = m.n_embd;
  const BertKeys b = bert_keys(m);
  io::HfTensorSources src;
  src.one("embeddings.word.weight", "bert.embeddings.word_embeddings.weight", {m.vocab_size, C});
  src.one("embeddings.position.weight", "bert.embeddings.position_embeddings.weight",
          {b.max_positions ? b.max_positions : m.seq_len, C});
  src.one("embeddings.token_type.weight", "bert.embeddings.token_type_embeddings.weight", {b.type_vocab_size, C});
  src.layer_norm("embeddings.ln", "bert.embeddings.LayerNorm", C);
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string t = fmt::format("blocks.{}.", i), h = fmt::format("bert.encoder.layer.{}.", i);
    src.qkv(t + "attn.qkv", h + "attention.self", C);
    src.linear(t + "attn.proj", h + "attention.output.dense", C, C, false);
    src.layer_norm(t + "ln_1", h + "attention.output.LayerNorm", C);
    src.linear(t + "mlp.fc", h + "intermediate.dense", C, 4 * C, false);
    src.linear(t + "mlp.proj", h + "output.dense", 4 * C, C, false);
    src.layer_norm(t + "ln_2", h + "output.LayerNorm", C);
  }
  src.linear("mlm.dense", "cls.predictions.transform.dense", C, C, false);
  src.layer_norm("mlm.ln", "cls.predictions.transform.LayerNorm", C);
  if (!b.tie_embeddings) src.one("mlm.weight", "cls.predictions.decoder.weight", {m.vocab_size, C});
  src.one("mlm.bias", "cls.predictions.bias", {m.vocab_size});
  return src.take();
}

}  // namespace

HfAdapter bert_hf_adapter() {
  return {.model_type = "bert",
          .architecture = "BertForMaskedLM",
          .base_prefix = "bert.",
          .read = bert_from_hf,
          .write = bert_to_hf,
          .tensors = tensors,
          // position_ids buffers, and the pooler and next-sentence head of BertForPreTraining.
          .ignored_on_load = [](const std::string& n) {
            return n.ends_with("embeddings.position_ids") || n.starts_with("bert.pooler.") ||
                   n.starts_with("pooler.") || n.starts_with("cls.seq_relationship.");
          }};
}

}  // namespace tidal::models
