// Where each tidal parameter lives in a Hugging Face state dict, for GPT-2, BERT, ViT and Llama:
// the HF tensors that make its whole tensor, their shapes, and how (GPT-2's Conv1D weights stored
// [in, out], the transpose of tidal's [out, in]; BERT's, ViT's and Llama's query, key and value
// stacked into tidal's fused qkv, Llama's query heads reordered for grouped-query attention;
// Llama's gate and up stacked into the SwiGLU's fc; ViT's [D, C, P, P] convolution as tidal's
// flattened [D, C*P*P]).
// Names are as the task model's save_pretrained writes them ("transformer.h.0.attn.c_attn.weight").
#pragma once

#include "core/shape.h"
#include "io/hf_config.h"

#include <set>
#include <string>
#include <vector>

namespace tidal::io {

struct HfTensorSource {
  std::string tidal_name;  // "blocks.0.attn.qkv.weight"
  std::vector<std::string> hf_names;  // stacked along tidal's dimension 0
  std::vector<Shape> hf_shapes;       // each as HF stores it
  bool transposed = false;            // HF stores [in, out]: tidal's tensor is its transpose
  // Grouped-query attention: the first HF tensor holds `query_heads` heads of equal rows in HF's
  // order, which tidal holds in its own (tidal_query_head); 0 = rows as they are.
  int query_heads = 0, kv_heads = 0;
};

// The head of tidal's fused qkv (nn/attention.h: query segment m, kv head k at m Hkv + k) that
// Hugging Face's query head h = k g + m is, g = n_head / n_kv_head.
int tidal_query_head(int hf_head, int n_head, int n_kv_head);

// Every parameter of the model `spec` describes, in tidal's model order.
std::vector<HfTensorSource> hf_tensor_sources(const HfModelSpec& spec);

// The name a file's tensor has in the task model's state dict: the base model's prefix added
// where a file saved from the bare base model (GPT2Model, BertModel) leaves it out, LayerNorm's
// old gamma / beta as weight / bias. `known` tells which canonical names exist.
std::string hf_canonical_name(HfFamily family, const std::string& name, const std::set<std::string>& known);

// Tensors transformers itself skips on load for this architecture: attention-mask buffers
// (GPT-2's attn.bias), position_ids, and BERT's pooler and next-sentence head.
bool hf_ignored_on_load(HfFamily family, const std::string& canonical_name);

}  // namespace tidal::io
