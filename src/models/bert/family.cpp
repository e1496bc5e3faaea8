#include "models/bert/family.h"

#include "models/bert/bert.h"
#include "models/bert/hf.h"

namespace tidal::models {

Family bert_family() {
  return {.name = "bert",
          .title = "BERT",
          .task = ModelTask::masked_lm,
          .keys = {"activation", "max_positions", "tie_embeddings", "type_vocab_size"},
          .build = [](const ModelBuild& b) {
            const ModelConfig& c = b.config;
            return make_bert({.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd,
                              .vocab_size = c.vocab_size, .seq_len = c.seq_len, .max_positions = c.max_positions,
                              .type_vocab_size = c.type_vocab_size, .dropout = float(c.dropout),
                              .ln_eps = float(norm_eps(c)), .activation = c.activation,
                              .checkpointing = b.checkpointing, .tie_embeddings = c.tie_embeddings,
                              .embedding_on_host = b.embedding_on_host},
                             b.layers);
          },
          .norm_eps = 1e-12,
          .hf = bert_hf_adapter()};
}

}  // namespace tidal::models
