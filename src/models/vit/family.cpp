#include "models/vit/family.h"

#include "models/vit/hf.h"
#include "models/vit/vit.h"

namespace tidal::models {

const KeyTable<VitKeys>& vit_key_table() {
  static const KeyTable<VitKeys> table =
      KeyTable<VitKeys>()
          .add("activation", &VitKeys::activation, ops::gelu_form_names(), "the MLP's GELU")
          .add("image_size", &VitKeys::image_size, "image height and width in pixels")
          .add("patch_size", &VitKeys::patch_size, "patch height and width")
          .add("channels", &VitKeys::channels, "image channels")
          .add("num_classes", &VitKeys::num_classes, "classes");
  return table;
}

VitKeys vit_keys(const ModelConfig& m) { return vit_key_table().read(m.family_keys); }

Family vit_family() {
  return {.name = "vit",
          .title = "ViT",
          .task = ModelTask::image_classification,
          .keys = vit_key_table().keys(),
          .build = [](const ModelBuild& b) {
            const ModelConfig& c = b.config;
            const VitKeys k = vit_keys(c);
            return make_vit({.n_layer = c.n_layer, .n_head = c.n_head, .n_embd = c.n_embd, .image_size = k.image_size,
                             .patch_size = k.patch_size, .channels = k.channels, .num_classes = k.num_classes,
                             .dropout = float(c.dropout), .ln_eps = float(norm_eps(c)), .activation = k.activation,
                             .checkpointing = b.checkpointing},
                            b.layers);
          },
          .norm_eps = 1e-6,
          .validate = [](const ModelConfig& m) {
            const VitKeys k = vit_keys(m);
            TIDAL_CHECK(k.patch_size >= 1 && k.image_size % k.patch_size == 0,
                        "model.image_size ({}) must be a multiple of model.patch_size ({})", k.image_size,
                        k.patch_size);
            TIDAL_CHECK(k.num_classes >= 2 && k.channels >= 1,
                        "model.num_classes must be >= 2 and model.channels >= 1");
          },
          .traits = [](const ModelConfig& m) {
            const VitKeys k = vit_keys(m);
            return ModelTraits{.channels = k.channels, .image_size = k.image_size, .patch_size = k.patch_size,
                               .classes = k.num_classes};
          },
          .hf = vit_hf_adapter()};
}

}  // namespace tidal::models
