#include "models/factory.h"

#include "models/bert.h"
#include "models/gpt.h"
#include "models/vit.h"

namespace tidal::models {

std::unique_ptr<Model> make_model(const config::ModelConfig& c, const nn::CheckpointPolicy& checkpointing,
                                  nn::LayerFactory& layers, bool embedding_on_host) {
  const float dropout = float(c.dropout);
  if (c.type == "gpt")
    return make_gpt({.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .vocab_size = c.vocab_size,
                     .seq_len = c.seq_len, .dropout = dropout, .checkpointing = checkpointing,
                     .tie_embeddings = c.tie_embeddings, .embedding_on_host = embedding_on_host},
                    layers);
  if (c.type == "bert")
    return make_bert({.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .vocab_size = c.vocab_size,
                      .seq_len = c.seq_len, .dropout = dropout, .checkpointing = checkpointing,
                      .tie_embeddings = c.tie_embeddings, .embedding_on_host = embedding_on_host},
                     layers);
  if (c.type == "vit")
    return make_vit({.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .image_size = c.image_size,
                     .patch_size = c.patch_size, .channels = c.channels, .num_classes = c.num_classes,
                     .dropout = dropout, .checkpointing = checkpointing},
                    layers);
  throw Error(fmt::format("model.type = \"{}\" is not one of gpt | bert | vit", c.type));
}

}  // namespace tidal::models
