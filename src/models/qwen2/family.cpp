#include "models/qwen2/family.h"

#include "models/llama/decoder.h"
#include "models/qwen2/hf.h"

namespace tidal::models {
namespace {

// Llama's options with Qwen2's biases: on q, k and v, none on the output projection.
LlamaConfig qwen2_config(const ModelConfig& c, const nn::CheckpointPolicy& checkpointing = {},
                         bool embedding_on_host = false) {
  LlamaConfig l = llama_config(c, checkpointing, embedding_on_host);
  l.qkv_bias = true;
  l.proj_bias = false;
  return l;
}

}  // namespace

Family qwen2_family() {
  Family f = llama_family();  // its norms, untied head, grouped queries and key checks
  f.name = "qwen2";
  f.title = "Qwen2";
  f.build = [](const ModelBuild& b) {
    return make_llama(qwen2_config(b.config, b.checkpointing, b.embedding_on_host), b.layers);
  };
  f.decoder = [](Model& model, const ModelConfig& c) -> std::unique_ptr<Decoder> {
    return std::make_unique<LlamaDecoder>(model, qwen2_config(c), llama_context(c));
  };
  f.validate = [llama = f.validate](const ModelConfig& m) {
    llama(m);
    const LlamaKeys k = llama_keys(m);
    TIDAL_CHECK(!k.attention_bias,
                "model.attention_bias is Llama's switch; model.type = \"qwen2\" always has biases on q, k and v and "
                "none on the output projection: leave model.attention_bias unset");
    TIDAL_CHECK(k.rope_scaling_factor == 0, "model.rope_scaling_factor = {} is Llama 3's frequency scaling, which "
                "Qwen2 does not have: leave it at 0", k.rope_scaling_factor);
  };
  f.hf = qwen2_hf_adapter();
  return f;
}

}  // namespace tidal::models
