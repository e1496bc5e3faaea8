// BERT (Devlin et al.), masked-LM pre-training head only: word + position + token-type
// embeddings with LayerNorm, post-LN blocks with a key padding mask, and the MLM head (dense,
// GELU, LayerNorm, decoder tied to the word embedding plus a bias). q, k and v are stored fused
// as one [3C, C] weight (rows q | k | v), which is the concatenation of BERT's three.
#pragma once

#include "models/model.h"
#include "nn/layer_factory.h"
#include "ops/gelu.h"

namespace tidal::models {

struct BertConfig {
  int n_layer = 12;
  int n_head = 12;
  std::int64_t n_embd = 768;
  std::int64_t vocab_size = 30522;
  std::int64_t seq_len = 512;
  std::int64_t max_positions = 0;  // the position table's rows; 0 = seq_len
  std::int64_t type_vocab_size = 2;
  float dropout = 0.0f;
  float ln_eps = 1e-12f;
  ops::GeluForm activation = ops::GeluForm::tanh;  // the MLP's GELU (HF: gelu_new = tanh, gelu = erf)
  float init_std = 0.02f;
  nn::CheckpointPolicy checkpointing{};  // activation checkpointing of the blocks
  bool tie_embeddings = true;            // false: the LM head has a table of its own
  bool embedding_on_host = false;        // the embedding layer runs on the host CPU (nn/on_host.h)
};

std::unique_ptr<Model> make_bert(const BertConfig& cfg, nn::LayerFactory& layers = nn::single_device_layers());

}  // namespace tidal::models
