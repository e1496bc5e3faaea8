// The ViT family's spec (model.type = "vit"): image classification (models/vit/vit.h).
#pragma once

#include "models/registry.h"

namespace tidal::models {

Family vit_family();

}  // namespace tidal::models
