// The Llama family (Llama 2 / 3, Mistral, Qwen2 and their kin share this shape): token embedding,
// pre-norm blocks of RMSNorm, causal attention with rotary positions and grouped-query heads,
// and a SwiGLU MLP (or a mixture of SwiGLU experts), none with biases; a final RMSNorm and an LM head of its own (tied to the
// token table if asked). Parameter names follow tidal's GPT (wte, blocks.{i}.{ln_1, attn.qkv,
// attn.proj, ln_2, mlp.fc, mlp.proj}, ln_f, lm_head); io/hf_layout maps them to
// LlamaForCausalLM's.
#pragma once

#include "models/model.h"
#include "nn/activation_checkpoint.h"
#include "nn/layer_factory.h"
#include "nn/moe.h"
#include "nn/rotary.h"

namespace tidal::models {

struct LlamaConfig {
  int n_layer = 4;
  int n_head = 8;
  int n_kv_head = 0;  // grouped-query attention's key / value heads; 0 = n_head
  std::int64_t n_embd = 256;
  std::int64_t intermediate_size = 768;  // the SwiGLU width I
  std::int64_t vocab_size = 512;
  float rms_eps = 1e-6f;
  nn::RotaryConfig rotary{.theta = 10000.0};
  bool qkv_bias = false;   // biases on q, k and v (Qwen2 has them)
  bool proj_bias = false;  // a bias on the attention's output projection
  float dropout = 0.0f;         // residual dropout (Llama trains without)
  float init_std = 0.02f;
  nn::CheckpointPolicy checkpointing{};
  bool tie_embeddings = false;
  bool embedding_on_host = false;  // the embedding layer runs on the host CPU (nn/on_host.h)
  // moe.experts > 0: a mixture of SwiGLU experts in each block's MLP place (Mixtral, Qwen2-MoE;
  // its layer and moe_layers filled per block).
  nn::MoeConfig moe{};
};

std::unique_ptr<Model> make_llama(const LlamaConfig& cfg, nn::LayerFactory& layers = nn::single_device_layers());

}  // namespace tidal::models
