// DeepSpeed-Ulysses self-attention (Jacobs et al., 2023): the other way to attend over a sequence
// split across N ranks. Each rank holds T' = T / N positions of every sample (its BatchSlice's
// runs, zig-zag or not); an all-to-all turns that into all T positions of H / N query heads and
// Hkv / N key/value heads, the flash attention op (ops/attention.h) runs on them as on one device,
// and a second all-to-all turns the output back into the sequence split. Backward does the same
// with dY and dQKV.
//
// Rank j's heads: kv heads [j Hkv', (j + 1) Hkv') (Hkv' = Hkv / N) and the query heads that
// attend with them, h = j Hkv' + g' + i Hkv (g' < Hkv', i < H / Hkv), held in the local order
// i Hkv' + g', so the round-robin kv_head_of holds locally too; their outputs fill the contiguous
// columns [j H' hd, (j + 1) H' hd) of y's grouped order (ops/attention.h output_head).
//
// Per rank and layer, forward sends (N - 1) / N of its B T' (H + 2 Hkv) hd qkv and of its B T' H hd
// output; backward the same of dY and dQKV. Kept for backward: the head-split qkv, y and the
// log-sum-exp; the ring's equal but for y, which the ring shares with the projection's input and
// Ulysses keeps head-split beside it. Heads must divide by N (a start-up error says so).
#pragma once

#include "comm/communicator.h"
#include "nn/batch_slice.h"
#include "nn/module.h"

#include <vector>

namespace tidal::nn::sp {

class UlyssesSelfAttention final : public Module {
 public:
  static constexpr int kTag = 3;  // apart from the ring's blocks (nn/sp/ring_pass.h)

  UlyssesSelfAttention(int n_head, int n_kv_head, bool causal, comm::Communicator& group, BatchSlice positions);

  // [B, T', (H + 2 Hkv) hd] (ops/attention.h's fused layout) -> [B, T', H hd] in grouped order.
  Tensor forward(const Tensor& qkv, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

 private:
  // Columns of a fused qkv row that rank j's heads take: [global, global + width) at local.
  struct Columns {
    std::int64_t global, local, width;
  };
  std::vector<Columns> columns_of(int j, std::int64_t hd) const;
  // x [B, T, W] (all positions) -> its rows at each rank's positions, [B, T', W] each; and back.
  std::vector<Tensor> rows_by_rank(const Tensor& x, const Context& ctx) const;
  void place_rows(Tensor& x, const std::vector<Tensor>& parts) const;

  int n_head_, n_kv_head_;
  bool causal_;
  comm::Communicator& group_;
  BatchSlice positions_;
};

}  // namespace tidal::nn::sp
