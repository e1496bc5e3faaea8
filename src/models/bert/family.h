// The BERT family's spec (model.type = "bert"): masked-LM pre-training (models/bert/bert.h).
#pragma once

#include "models/registry.h"

namespace tidal::models {

Family bert_family();

}  // namespace tidal::models
