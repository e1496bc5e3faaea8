// A Hugging Face model directory's config.json, for the architectures tidal builds: GPT-2
// (GPT2LMHeadModel), BERT (BertForMaskedLM), ViT (ViTForImageClassification) and Llama
// (LlamaForCausalLM). Reading
// fills what `transformers` would (its config classes' defaults for keys the file leaves out, as
// save_pretrained omits them); a setting tidal's model cannot express is an error naming the key.
// Writing gives the config.json of an exported model.
#pragma once

#include <cstdint>
#include <string>

namespace tidal::io {

enum class HfFamily { gpt2, bert, vit, llama };

struct HfModelSpec {
  HfFamily family = HfFamily::gpt2;
  int n_layer = 12;
  int n_head = 12;
  std::int64_t n_embd = 768;
  std::int64_t vocab_size = 50257;  // gpt2, bert, llama
  std::int64_t max_positions = 1024;  // gpt2: n_positions; bert, llama: max_position_embeddings
  std::int64_t type_vocab_size = 2;   // bert
  double ln_eps = 1e-5;
  bool gelu_erf = false;  // the MLP's activation: "gelu" (erf) or "gelu_new" (tanh)
  bool tie_embeddings = true;  // gpt2, bert, llama
  // llama
  int n_kv_head = 0;  // num_key_value_heads; 0 = n_head
  std::int64_t intermediate_size = 0;
  double rope_theta = 10000.0;
  double rope_scaling_factor = 0.0;  // rope_scaling {"rope_type": "llama3", ...}; 0 = none
  double rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  std::int64_t rope_original_max_positions = 8192;
  bool attention_bias = false;
  std::int64_t image_size = 224, patch_size = 16, channels = 3, num_classes = 2;  // vit
  // Written, not read: tidal's embedding and residual dropout (model.dropout is a training
  // choice, not the architecture's); tidal has no attention dropout, so that is written 0.
  double dropout = 0.0;
};

// dir/config.json. Throws tidal::Error naming the file and key (missing file, malformed JSON,
// another architecture, an unsupported option).
HfModelSpec read_hf_config(const std::string& dir);

// The config.json of `spec` (architectures, model_type and every size), as from_pretrained reads it.
std::string hf_config_json(const HfModelSpec& spec);

// "GPT2LMHeadModel", "BertForMaskedLM", "ViTForImageClassification", "LlamaForCausalLM".
const char* hf_architecture(HfFamily family);

}  // namespace tidal::io
