// Llama as Hugging Face writes it (LlamaForCausalLM, model_type "llama"): config.json's keys (Llama
// 3.1's rope_scaling included) and the state dict's names, q, k, v and gate, up separate. The
// shape's parts are here for its kin (Qwen2) to share.
#pragma once

#include "models/hf_adapter.h"
#include "models/llama/family.h"

namespace tidal::models {

HfAdapter llama_hf_adapter();

// The config class's defaults for the keys a Llama-shaped config.json may leave out.
struct LlamaHfDefaults {
  int n_layer = 32, n_head = 32;
  std::int64_t n_embd = 4096, intermediate_size = 11008, vocab_size = 32000, max_positions = 2048;
};
// Reads the keys every Llama-shaped config.json has (sizes, heads, rms_norm_eps, rope_theta, the
// tied head, a SwiGLU MLP, the head size) into `m` and `keys`; returns the keys of every family
// they decide (the family's own are its table's to write).
std::vector<std::string> read_llama_shape(const io::HfConfigKeys& k, ModelConfig& m, LlamaKeys& keys,
                                          const LlamaHfDefaults& d);
// Those keys of `m` as config.json writes them.
nlohmann::json llama_shape_json(const ModelConfig& m);
// Where one block's MLP lives: tidal's names under `tidal` ("blocks.3.mlp."), Hugging Face's under
// `hf` ("model.layers.3.").
using HfMlpTensors = std::function<void(io::HfTensorSources& src, const std::string& tidal, const std::string& hf)>;
// Llama's: mlp.gate_proj | mlp.up_proj as tidal's fused fc, mlp.down_proj as its proj.
void llama_hf_mlp(io::HfTensorSources& src, const std::string& tidal, const std::string& hf, std::int64_t n_embd,
                  std::int64_t width, const std::string& hf_mlp = "mlp.");
// Where each parameter of a Llama-shaped model of `m` lives, with biases on q, k and v and on the
// output projection as asked, each block's MLP where `mlp` says (default: Llama's).
std::vector<io::HfTensorSource> llama_hf_tensors(const ModelConfig& m, bool qkv_bias, bool proj_bias,
                                                 const HfMlpTensors& mlp = {});

}  // namespace tidal::models
