#include "models/factory.h"

#include "models/registry.h"

namespace tidal::models {

std::unique_ptr<Model> make_model(const ModelConfig& c, const nn::CheckpointPolicy& checkpointing,
                                  nn::LayerFactory& layers, bool embedding_on_host) {
  return find_family(c.type).build(
      {.config = c, .layers = layers, .checkpointing = checkpointing, .embedding_on_host = embedding_on_host});
}

bool generates_text(const ModelConfig& cfg) { return find_family(cfg.type).decoder != nullptr; }

std::unique_ptr<Decoder> make_decoder(Model& model, const ModelConfig& cfg) {
  const Family& f = find_family(cfg.type);
  TIDAL_CHECK(f.decoder != nullptr, "text generation works with {} models, and this is a {} model",
              generating_families(), cfg.type);
  return f.decoder(model, cfg);
}

}  // namespace tidal::models
