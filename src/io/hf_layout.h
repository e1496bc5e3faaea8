// Where a tidal parameter lives in a Hugging Face state dict: the HF tensors that make its whole
// tensor, their shapes, and how (Conv1D weights stored [in, out], the transpose of tidal's
// [out, in]; separate query, key and value stacked into tidal's fused qkv, grouped-query heads
// reordered; gate and up stacked into a SwiGLU's fc). Each family lists its own
// (models/<family>/hf.cpp) with the builder below. Names are as the task model's
// save_pretrained writes them ("transformer.h.0.attn.c_attn.weight").
#pragma once

#include "core/shape.h"

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

// Collects a model's sources in tidal's order; a layer's weight and bias come from one call.
class HfTensorSources {
 public:
  void add(std::string tidal, std::vector<std::string> hf, std::vector<Shape> shapes, bool transposed = false);
  void one(const std::string& tidal, const std::string& hf, Shape shape, bool transposed = false);
  // A Linear: tidal weight [out, in]; HF's nn.Linear the same, GPT-2's Conv1D [in, out].
  void linear(const std::string& tidal, const std::string& hf, std::int64_t in, std::int64_t out, bool conv1d);
  void layer_norm(const std::string& tidal, const std::string& hf, std::int64_t c);
  // Separate query, key and value Linears (hf + ".query", ".key", ".value") as tidal's fused qkv
  // (rows q | k | v), weight and bias.
  void qkv(const std::string& tidal, const std::string& hf, std::int64_t c);
  // q_proj, k_proj and v_proj (hf + "q_proj." ...) as tidal's fused qkv's `part` ("weight": rows of
  // `per_head` columns, "bias": per_head = 0), the query heads reordered for grouped-query
  // attention of head size `head_dim`.
  void grouped_qkv(const std::string& tidal, const std::string& hf, int n_head, int n_kv_head, std::int64_t head_dim,
                   const char* part, std::int64_t per_head);
  std::vector<HfTensorSource> take() { return std::move(out_); }

 private:
  std::vector<HfTensorSource> out_;
};

// The head of tidal's fused qkv (nn/attention.h: query segment m, kv head k at m Hkv + k) that
// Hugging Face's query head h = k g + m is, g = n_head / n_kv_head.
int tidal_query_head(int hf_head, int n_head, int n_kv_head);

// The name a file's tensor has in the task model's state dict: the base model's `base_prefix`
// ("transformer.") added where a file saved from the bare base model (GPT2Model, BertModel)
// leaves it out, LayerNorm's old gamma / beta as weight / bias. `known` tells which canonical
// names exist.
std::string hf_canonical_name(const std::string& base_prefix, const std::string& name,
                              const std::set<std::string>& known);

}  // namespace tidal::io
