// The ViT family's spec (model.type = "vit"): image classification (models/vit/vit.h) and its
// keys, the images' shape and the classes.
#pragma once

#include "models/family_keys.h"
#include "models/registry.h"
#include "ops/gelu_form.h"

namespace tidal::models {

struct VitKeys {
  ops::GeluForm activation = ops::GeluForm::tanh;
  std::int64_t image_size = 32;  // height and width in pixels
  std::int64_t patch_size = 8;
  std::int64_t channels = 3;
  std::int64_t num_classes = 10;
};
const KeyTable<VitKeys>& vit_key_table();
VitKeys vit_keys(const ModelConfig& m);

Family vit_family();

}  // namespace tidal::models
