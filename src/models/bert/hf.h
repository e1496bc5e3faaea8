// BERT as Hugging Face writes it (BertForMaskedLM, model_type "bert"): config.json's keys and the
// state dict's names, query, key and value separate.
#pragma once

#include "models/hf_adapter.h"

namespace tidal::models {

HfAdapter bert_hf_adapter();

}  // namespace tidal::models
