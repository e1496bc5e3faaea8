#include "models/builtin_families.h"

#include "models/bert/family.h"
#include "models/gpt/family.h"
#include "models/llama/family.h"
#include "models/mixtral/family.h"
#include "models/qwen2/family.h"
#include "models/qwen2_moe/family.h"
#include "models/vit/family.h"

namespace tidal::models {

std::vector<Family> builtin_families() {
  return {gpt_family(), bert_family(), vit_family(), llama_family(), qwen2_family(), mixtral_family(), qwen2_moe_family()};
}

}  // namespace tidal::models
