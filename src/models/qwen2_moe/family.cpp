#include "models/qwen2_moe/family.h"

#include "models/llama/decoder.h"
#include "models/qwen2_moe/hf.h"

namespace tidal::models {
namespace {

LlamaConfig qwen2_moe_config(const ModelConfig& c, const nn::CheckpointPolicy& checkpointing = {},
                             bool embedding_on_host = false) {
  LlamaConfig l = llama_config(c, checkpointing, embedding_on_host);
  l.qkv_bias = true;
  l.proj_bias = false;
  l.moe = moe_config(c, moe_keys(c).norm_topk_prob);
  return l;
}

}  // namespace

const KeyTable<MoeKeys>& qwen2_moe_key_table() {
  static const KeyTable<MoeKeys> table = KeyTable<MoeKeys>(mixtral_key_table()).add_all(
      moe_key_table().only({"expert_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob"}));
  return table;
}

Family qwen2_moe_family() {
  Family f = mixtral_family();
  f.name = "qwen2_moe";
  f.title = "Qwen2-MoE";
  f.keys = qwen2_moe_key_table().keys();
  f.build = [](const ModelBuild& b) {
    return make_llama(qwen2_moe_config(b.config, b.checkpointing, b.embedding_on_host), b.layers);
  };
  f.decoder = [](Model& model, const ModelConfig& c) -> std::unique_ptr<Decoder> {
    return std::make_unique<LlamaDecoder>(model, qwen2_moe_config(c), llama_context(c));
  };
  f.hf = qwen2_moe_hf_adapter();
  return f;
}

}  // namespace tidal::models
