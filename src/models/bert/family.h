// The BERT family's spec (model.type = "bert"): masked-LM pre-training (models/bert/bert.h) and
// its keys, GPT's and the token types.
#pragma once

#include "models/gpt/family.h"
#include "models/registry.h"

namespace tidal::models {

struct BertKeys : GptKeys {
  std::int64_t type_vocab_size = 2;  // token types
};
const KeyTable<BertKeys>& bert_key_table();
BertKeys bert_keys(const ModelConfig& m);

Family bert_family();

}  // namespace tidal::models
