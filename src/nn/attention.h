// Multi-head self-attention: fused qkv projection, rotary embeddings if asked (Llama), scaled
// dot-product attention (causal for GPT and Llama, key padding mask from the batch for BERT),
// output projection. The parts come from a LayerFactory: under tensor parallelism qkv is an
// input_linear whose q, k and v are split by heads (each rank attends with its n_head /
// feature_parts heads) and proj an output_linear; under sequence parallelism the attention
// itself is the ring's (nn/sp/ring_attention.h).
//
// Grouped-query attention (GQA, Ainslie et al. 2023; Llama 2 70B, Llama 3, Mistral): n_kv_head
// key / value heads, each shared by g = n_head / n_kv_head query heads. The fused qkv holds g + 2
// equal segments of n_kv_head heads: query segment m holds, for every kv head k, the m-th query
// head of k's group (Hugging Face's query head k g + m, io/hf_layout reorders), then k, then v.
// A split by heads then takes the same kv heads' share of every segment, so each rank holds whole
// groups, and query head j of a rank's qkv uses its kv head j % n_kv_head' (ops/attention.h).
// Attention writes its output grouped by kv head (Hugging Face's order again), so a rank's heads
// are one contiguous block of the output projection's input features.
#pragma once

#include "nn/layer_factory.h"
#include "nn/rotary.h"

namespace tidal::nn {

struct AttentionConfig {
  int n_head = 1;
  int n_kv_head = 0;  // key / value heads; 0 = n_head
  bool causal = false;
  bool bias = true;        // on the qkv projection
  bool proj_bias = true;   // on the output projection
  RotaryConfig rotary{};   // theta 0: no rotary embeddings (positions are learned elsewhere)
  // Selective recomputation: the attention's qkv input is let go after forward and remade in
  // backward by the qkv projection (and rotary) from the projection's input, which it keeps anyway.
  // Attention that keeps a copy instead (Ulysses' heads after the all-to-all) keeps it.
  bool recompute_qkv = false;
};

// Scaled dot-product attention of the heads and samples a rank holds whole: qkv [B', T,
// (H' + 2 Hkv') hd] -> y [B', T, H' hd], flash-style: it keeps qkv, y and each query's
// log-sum-exp [B', H', T] for backward, never the probabilities. The key mask is the batch's,
// for the `samples`.
class ScaledDotProductAttention final : public Module {
 public:
  ScaledDotProductAttention(int n_head, int n_kv_head, bool causal, BatchSlice samples)
      : n_head_(n_head), n_kv_head_(n_kv_head), causal_(causal), samples_(samples) {}

  Tensor forward(const Tensor& qkv, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  int n_head_, n_kv_head_;
  bool causal_;
  BatchSlice samples_;
};

class MultiHeadSelfAttention final : public Module {
 public:
  MultiHeadSelfAttention(std::int64_t n_embd, const AttentionConfig& cfg, ParameterInit init, ParameterInit proj_init,
                         LayerFactory& layers);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [B, T, C] -> [B, T, C]
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  Tensor qkv(const Tensor& x, Context& ctx);  // the projection, and rotary when asked

  Module* qkv_;                // weight [(H + 2 Hkv) hd, C]: rows q | k | v
  Module* rotary_ = nullptr;   // in place on qkv, when asked
  Module* attention_;          // this rank's heads
  Module* proj_;               // weight [C, C]
  bool recompute_qkv_;
};

}  // namespace tidal::nn
