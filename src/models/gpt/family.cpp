#include "models/gpt/family.h"

#include "models/gpt/decoder.h"
#include "models/gpt/hf.h"

namespace tidal::models {

const KeyTable<GptKeys>& gpt_key_table() {
  static const KeyTable<GptKeys> table =
      KeyTable<GptKeys>()
          .add("max_positions", &GptKeys::max_positions,
               "learned positions (0 = model.seq_len; sampling can go this far); llama: the context")
          .add("activation", &GptKeys::activation, ops::gelu_form_names(),
               "gelu_tanh (GPT-2's gelu_new) | gelu_erf (BERT's and ViT's gelu): the MLP's GELU")
          .add("tie_embeddings", &GptKeys::tie_embeddings,
               "the LM head reads the token embedding's table (GPT-2, BERT); false gives the head a table of its own "
               "(lm_head.weight, mlm.weight); llama's default is false");
  return table;
}

GptKeys gpt_keys(const ModelConfig& m) { return gpt_key_table().read(m.family_keys); }

GptConfig gpt_config(const ModelConfig& c, const nn::CheckpointPolicy& checkpointing, bool embedding_on_host) {
  const GptKeys k = gpt_keys(c);
  return {.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .vocab_size = c.vocab_size,
          .seq_len = c.seq_len, .max_positions = k.max_positions, .dropout = float(c.dropout),
          .ln_eps = float(norm_eps(c)), .activation = k.activation, .checkpointing = checkpointing,
          .tie_embeddings = k.tie_embeddings, .embedding_on_host = embedding_on_host};
}

Family gpt_family() {
  return {.name = "gpt",
          .title = "GPT",
          .task = ModelTask::causal_lm,
          .keys = gpt_key_table().keys(),
          .build = [](const ModelBuild& b) {
            return make_gpt(gpt_config(b.config, b.checkpointing, b.embedding_on_host), b.layers);
          },
          .decoder = [](Model& model, const ModelConfig& c) -> std::unique_ptr<Decoder> {
            return std::make_unique<GptDecoder>(model, gpt_config(c));
          },
          .norm_eps = 1e-5,
          .traits = [](const ModelConfig& m) {
            const GptKeys k = gpt_keys(m);
            return ModelTraits{.positions = k.max_positions, .tied_head = k.tie_embeddings};
          },
          .hf = gpt2_hf_adapter()};
}

}  // namespace tidal::models
