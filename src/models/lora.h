// LoRA on a whole model (finetune.method = "lora"): low-rank adapters (nn/lora.h) on the linears
// that finetune.lora_targets names by their Hugging Face module names (q_proj, v_proj, GPT-2's
// c_attn, ...), found through the family's Hugging Face layout (models/hf_adapter.h), so a fused
// linear of tidal's takes an adapter on each of its blocks that is targeted; every other parameter
// of the model is frozen (nn::Parameter::frozen).
#pragma once

#include "models/model.h"
#include "io/hf_layout.h"
#include "models/model_config.h"
#include "nn/lora.h"

#include <set>
#include <string>
#include <vector>

namespace tidal::models {

// What a model's adapters are: the linears by Hugging Face module name, and the adapters' shape.
struct LoraSpec {
  std::vector<std::string> targets;
  nn::LoraOptions options;
};

// finetune.lora_targets as a list: names separated by commas or spaces; "" = PEFT's default for
// the family's model_type (q_proj and v_proj; GPT-2's c_attn; BERT's and ViT's query and value).
std::vector<std::string> lora_targets(const ModelConfig& m, const std::string& text);

// The tidal names of the model's linear weights (what QLoRA holds in NF4): every 2-D weight of the
// family's Hugging Face layout but the embedding tables and the LM head.
std::set<std::string> linear_weights(const ModelConfig& m);

// Where each adapter's A and B live in a PEFT adapter file (adapter_model.safetensors), in the
// model's order: "base_model.model." + the Hugging Face module + ".lora_A.weight" [r, in] and
// ".lora_B.weight" [rows, r], B's query rows reordered as the base's are (grouped-query heads).
std::vector<io::HfTensorSource> lora_hf_tensors(const ModelConfig& m, const std::vector<std::string>& targets,
                                                int rank);

// Attaches the adapters to `model` (built, not yet materialized) and freezes the rest;
// returns them in the model's order, each split as its linear says (Module::adapter_split). A
// target that names none of the family's linears is an error that lists them.
std::vector<nn::LowRankAdapter*> attach_lora(Model& model, const ModelConfig& m, const LoraSpec& spec);

// Folds every adapter into its linear's weight: W[block] += (alpha / r) B A, on the host in fp32
// (what PEFT's merge_and_unload computes). The adapters stay attached: call it on a model that
// only reads the merged weights (the decoders of tidal sample, an export).
void merge_lora(Model& model);

}  // namespace tidal::models
