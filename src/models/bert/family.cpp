#include "models/bert/family.h"

#include "models/bert/bert.h"
#include "models/bert/hf.h"

namespace tidal::models {

const KeyTable<BertKeys>& bert_key_table() {
  static const KeyTable<BertKeys> table =
      KeyTable<BertKeys>().add_all(gpt_key_table()).add("type_vocab_size", &BertKeys::type_vocab_size, "token types", 1);
  return table;
}

BertKeys bert_keys(const ModelConfig& m) { return bert_key_table().read(m.family_keys); }

Family bert_family() {
  return {.name = "bert",
          .title = "BERT",
          .task = ModelTask::masked_lm,
          .keys = bert_key_table().keys(),
          .build = [](const ModelBuild& b) {
            const ModelConfig& c = b.config;
            const BertKeys k = bert_keys(c);
            return make_bert({.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd,
                              .vocab_size = c.vocab_size, .seq_len = c.seq_len, .max_positions = k.max_positions,
                              .type_vocab_size = k.type_vocab_size, .dropout = float(c.dropout),
                              .ln_eps = float(norm_eps(c)), .activation = k.activation,
                              .checkpointing = b.checkpointing, .tie_embeddings = k.tie_embeddings,
                              .embedding_on_host = b.embedding_on_host},
                             b.layers);
          },
          .norm_eps = 1e-12,
          .traits = [](const ModelConfig& m) {
            const BertKeys k = bert_keys(m);
            return ModelTraits{.positions = k.max_positions, .tied_head = k.tie_embeddings};
          },
          .hf = bert_hf_adapter()};
}

}  // namespace tidal::models
