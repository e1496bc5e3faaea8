#include "models/vit/family.h"

#include "models/vit/hf.h"
#include "models/vit/vit.h"

namespace tidal::models {

Family vit_family() {
  return {.name = "vit",
          .title = "ViT",
          .task = ModelTask::image_classification,
          .keys = {"activation", "image_size", "patch_size", "channels", "num_classes"},
          .build = [](const ModelBuild& b) {
            const ModelConfig& c = b.config;
            return make_vit({.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .image_size = c.image_size,
                             .patch_size = c.patch_size, .channels = c.channels, .num_classes = c.num_classes,
                             .dropout = float(c.dropout), .ln_eps = float(norm_eps(c)), .activation = c.activation,
                             .checkpointing = b.checkpointing},
                            b.layers);
          },
          .norm_eps = 1e-6,
          .hf = vit_hf_adapter()};
}

}  // namespace tidal::models
