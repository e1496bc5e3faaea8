// Ring self-attention (colossal-ai.txt sec. II-B-3 and Fig. 8; Li et al., "Sequence parallelism",
// 2021), flash-style: each place of the sequence ring holds T' = T / N positions of every sample,
// with their queries, keys and values. Forward passes the key/value blocks around the ring (N - 1
// hops), and each rank folds every arriving block into its queries' running output, maximum and
// sum (FlashAttention-2's online softmax; ops/ring_attention.h), causal by global position and
// with the batch's padding mask. So forward keeps only the output and the log-sum-exp, never the
// [B, H, T', T] probabilities. Backward passes the blocks around again: each rank recomputes its
// share of a block's probabilities from the log-sum-exp, adds into its dq, and the block's dK/dV
// travel home behind it (nn/sp/ring_pass.h).
//
// Zig-zag places (nn/batch_slice.h) hold two runs of positions each: a rank's queries and every
// arriving block are taken run by run (views, no copies: the ops read strided rows), and under
// the causal mask each place then attends the same number of keys. Pairs of runs whose keys all
// come after the queries are skipped; every block still travels the whole ring.
//
// Per rank and layer, with key/value blocks of B T' 2 Hkv hd elements (grouped-query heads: only
// the Hkv key / value heads travel, never copies up to H): forward sends N - 1 blocks, backward
// 2 (N - 1) (the blocks and their gradients): 2 (N - 1) and 4 (N - 1) blocks of K or V alone.
// Kept for backward: qkv as given (q and this rank's key/value block are remade from it), y (fp32,
// also the output) and the log-sum-exp [B, H, T']: O(T / N), no term in T^2. The kernels are fp32: under mixed precision
// q, k, v are widened on the way in (and travel the ring in fp32) and y, dqkv rounded on the way
// out.
#pragma once

#include "comm/communicator.h"
#include "nn/batch_slice.h"
#include "nn/module.h"
#include "ops/ring_attention.h"

namespace tidal::nn::sp {

class RingSelfAttention final : public Module {
 public:
  // `ring` is the sequence group, ordered by place in the ring; `positions` says which runs of
  // the sequence each place holds (one, or two zig-zag: nn/batch_slice.h).
  RingSelfAttention(int n_head, int n_kv_head, bool causal, comm::Communicator& ring, BatchSlice positions)
      : n_head_(n_head), n_kv_head_(n_kv_head), causal_(causal), ring_(ring), positions_(positions) {}

  // [B, T', (H + 2 Hkv) hd] (ops/attention.h's fused layout) -> [B, T', H hd] in grouped order.
  Tensor forward(const Tensor& qkv, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  // The ops' options for a run of queries starting at global position first_query.
  ops::RingAttentionOptions options(const Context& ctx, std::int64_t first_query) const;

  int n_head_, n_kv_head_;
  bool causal_;
  comm::Communicator& ring_;
  BatchSlice positions_;
};

}  // namespace tidal::nn::sp
