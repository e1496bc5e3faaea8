#include "models/gpt/family.h"

#include "models/gpt/decoder.h"
#include "models/gpt/hf.h"

namespace tidal::models {

GptConfig gpt_config(const ModelConfig& c, const nn::CheckpointPolicy& checkpointing, bool embedding_on_host) {
  return {.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .vocab_size = c.vocab_size,
          .seq_len = c.seq_len, .max_positions = c.max_positions, .dropout = float(c.dropout),
          .ln_eps = float(norm_eps(c)), .activation = c.activation, .checkpointing = checkpointing,
          .tie_embeddings = c.tie_embeddings, .embedding_on_host = embedding_on_host};
}

Family gpt_family() {
  return {.name = "gpt",
          .title = "GPT",
          .task = ModelTask::causal_lm,
          .keys = {"activation", "max_positions", "tie_embeddings"},
          .build = [](const ModelBuild& b) {
            return make_gpt(gpt_config(b.config, b.checkpointing, b.embedding_on_host), b.layers);
          },
          .decoder = [](Model& model, const ModelConfig& c) -> std::unique_ptr<Decoder> {
            return std::make_unique<GptDecoder>(model, gpt_config(c));
          },
          .norm_eps = 1e-5,
          .hf = gpt2_hf_adapter()};
}

}  // namespace tidal::models
