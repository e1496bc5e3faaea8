// GPT-2 as Hugging Face writes it (GPT2LMHeadModel, model_type "gpt2"): config.json's keys and
// the state dict's names, Conv1D weights stored [in, out].
#pragma once

#include "models/hf_adapter.h"

namespace tidal::models {

HfAdapter gpt2_hf_adapter();

}  // namespace tidal::models
