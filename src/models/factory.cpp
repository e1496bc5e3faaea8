#include "models/factory.h"

#include "config/hf_model.h"
#include "models/bert.h"
#include "models/gpt.h"
#include "models/registry.h"
#include "models/vit.h"

#include <map>
#include <mutex>

namespace tidal::models {


nn::CheckpointPolicy checkpoint_policy(const config::TrainConfig& tc) {
  const int every = tc.activation_checkpointing == config::Recompute::blocks    ? 1
                    : tc.activation_checkpointing == config::Recompute::every_k ? tc.activation_checkpointing_k
                                                                                : 0;
  return {.every = every,
          .offload_to_host = tc.activation_offload == config::ActivationOffload::host,
          .selective = tc.activation_checkpointing == config::Recompute::selective,
          .loss_chunks = tc.loss_chunks};
}

GptConfig gpt_config(const config::ModelConfig& c, const nn::CheckpointPolicy& checkpointing, bool embedding_on_host) {
  return {.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .vocab_size = c.vocab_size,
          .seq_len = c.seq_len, .max_positions = c.max_positions, .dropout = float(c.dropout),
          .ln_eps = float(config::effective_ln_eps(c)), .activation = c.activation, .checkpointing = checkpointing,
          .tie_embeddings = c.tie_embeddings, .embedding_on_host = embedding_on_host};
}

LlamaConfig llama_config(const config::ModelConfig& c, const nn::CheckpointPolicy& checkpointing,
                         bool embedding_on_host) {
  return {.n_layer = c.n_layer, .n_head = c.n_head, .n_kv_head = c.n_kv_head, .n_embd = c.n_embd,
          .intermediate_size = config::effective_intermediate_size(c), .vocab_size = c.vocab_size,
          .rms_eps = float(config::effective_ln_eps(c)),
          .rotary = {.theta = c.rope_theta,
                     .scaling = {.factor = float(c.rope_scaling_factor), .low_freq_factor = float(c.rope_low_freq_factor),
                                 .high_freq_factor = float(c.rope_high_freq_factor),
                                 .original_max_positions = c.rope_original_max_positions}},
          .attention_bias = c.attention_bias, .dropout = float(c.dropout), .checkpointing = checkpointing,
          .tie_embeddings = c.tie_embeddings, .embedding_on_host = embedding_on_host};
}

namespace {

std::unique_ptr<Model> make_builtin(const config::ModelConfig& c, const nn::CheckpointPolicy& checkpointing,
                                    nn::LayerFactory& layers, bool embedding_on_host) {
  const float dropout = float(c.dropout), ln_eps = float(config::effective_ln_eps(c));
  const ops::GeluForm activation = c.activation;
  if (c.type == "gpt") return make_gpt(gpt_config(c, checkpointing, embedding_on_host), layers);
  if (c.type == "bert")
    return make_bert({.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .vocab_size = c.vocab_size,
                      .seq_len = c.seq_len, .max_positions = c.max_positions, .type_vocab_size = c.type_vocab_size,
                      .dropout = dropout, .ln_eps = ln_eps, .activation = activation, .checkpointing = checkpointing,
                      .tie_embeddings = c.tie_embeddings, .embedding_on_host = embedding_on_host},
                     layers);
  if (c.type == "vit")
    return make_vit({.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .image_size = c.image_size,
                     .patch_size = c.patch_size, .channels = c.channels, .num_classes = c.num_classes,
                     .dropout = dropout, .ln_eps = ln_eps, .activation = activation, .checkpointing = checkpointing},
                    layers);
  TIDAL_ASSERT(c.type == "llama", "model.type {} is not built in", c.type);
  return make_llama(llama_config(c, checkpointing, embedding_on_host), layers);
}

// The registered builders of types beyond the built-in ones.
struct Builders {
  std::mutex mutex;
  std::map<std::string, ModelBuilder> by_type;
};
Builders& builders() {
  static Builders b;
  return b;
}

}  // namespace

void register_model(const std::string& type, config::ModelTask task, ModelBuilder build) {
  TIDAL_CHECK(build != nullptr, "register_model(\"{}\"): no builder given", type);
  config::add_model_type(type, task);  // refuses a name taken
  Builders& b = builders();
  std::lock_guard lock(b.mutex);
  b.by_type.emplace(type, std::move(build));
}

std::unique_ptr<Model> make_model(const config::ModelConfig& c, const nn::CheckpointPolicy& checkpointing,
                                  nn::LayerFactory& layers, bool embedding_on_host) {
  if (config::builtin_model_type(c.type)) return make_builtin(c, checkpointing, layers, embedding_on_host);
  ModelBuilder build;
  {
    Builders& b = builders();
    std::lock_guard lock(b.mutex);
    const auto it = b.by_type.find(c.type);
    TIDAL_CHECK(it != b.by_type.end(), "model.type = \"{}\" is not one of {}", c.type, config::model_type_names());
    build = it->second;
  }
  return build({.config = c, .layers = layers, .checkpointing = checkpointing, .embedding_on_host = embedding_on_host});
}

}  // namespace tidal::models
