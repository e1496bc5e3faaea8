// ViT as Hugging Face writes it (ViTForImageClassification, model_type "vit"): config.json's keys
// (the classes as id2label) and the state dict's names, the patch convolution [D, C, P, P].
#pragma once

#include "models/hf_adapter.h"

namespace tidal::models {

HfAdapter vit_hf_adapter();

}  // namespace tidal::models
