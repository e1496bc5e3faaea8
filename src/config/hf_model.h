// tidal's [model] and a Hugging Face config.json, both ways: model.init_from's directory fills
// the architecture keys, and a tidal model's architecture is written as Hugging Face's (export).
#pragma once

#include "config/config.h"
#include "io/hf_config.h"

#include <map>
#include <string>

namespace tidal::config {

// Each key a config file or --set gave, and where ("cfg.toml:12", "--set model.n_layer=4").
using SetBy = std::map<std::string, std::string>;

// Reads cfg.model.init_from's config.json into cfg.model. A key set explicitly to another value
// than the file's is an error naming both; model.seq_len (how long the training sequences are)
// stays the user's, within the file's positions.
void apply_init_from(Config& cfg, const SetBy& set_by);

// The Hugging Face architecture of a tidal model (gpt -> GPT2LMHeadModel, bert ->
// BertForMaskedLM, vit -> ViTForImageClassification).
io::HfModelSpec hf_spec(const ModelConfig& m);

// The LayerNorm epsilon a model uses: model.ln_eps, or its type's own when 0.
double effective_ln_eps(const ModelConfig& m);
// model.intermediate_size, or when 0 Llama's: 2/3 of 4 n_embd rounded up to a multiple of 256
// (the width Llama's reference code gives a SwiGLU MLP).
std::int64_t effective_intermediate_size(const ModelConfig& m);

}  // namespace tidal::config
