// Ring self-attention (colossal-ai.txt sec. II-B-3 and Fig. 8; Li et al., "Sequence parallelism",
// 2021): each rank of the sequence ring holds positions [s T', (s + 1) T') of every sample, with
// their queries, keys and values. Forward passes the key blocks around the ring (N - 1 hops) to
// build this rank's rows of the scores over all T positions, takes the softmax over whole rows
// (causal by global position, padding masks from the batch), then passes the value blocks to
// form P V. Backward passes the values again for dP and the value gradients, and the keys again
// for dQ and the key gradients; the gradients of K and V travel back around the ring to their
// owners (nn/sp/ring_pass.h).
//
// Per rank and layer, with blocks of B T' Hkv hd elements (grouped-query heads: only the Hkv
// key / value heads travel, never copies up to H): forward sends 2 (N - 1) blocks (K, V),
// backward 4 (N - 1) (K, V, dK, dV). Kept for backward: q, k, v and the probabilities
// [B, H, T', T] (T / N of the single process's). The kernels are fp32: under mixed precision
// q, k, v are widened on the way in (and travel the ring in fp32) and y, dqkv rounded on the way
// out.
#pragma once

#include "comm/communicator.h"
#include "nn/module.h"
#include "ops/ring_attention.h"

namespace tidal::nn::sp {

class RingSelfAttention final : public Module {
 public:
  // `ring` is the sequence group, ordered by position in the sequence.
  RingSelfAttention(int n_head, int n_kv_head, bool causal, comm::Communicator& ring)
      : n_head_(n_head), n_kv_head_(n_kv_head), causal_(causal), ring_(ring) {}

  // [B, T', (H + 2 Hkv) hd] (ops/attention.h's fused layout) -> [B, T', H hd] in grouped order.
  Tensor forward(const Tensor& qkv, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  // For this rank's Tq queries.
  ops::RingAttentionOptions options(const Context& ctx, std::int64_t Tq) const;

  int n_head_, n_kv_head_;
  bool causal_;
  comm::Communicator& ring_;
};

}  // namespace tidal::nn::sp
