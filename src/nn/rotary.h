// Rotary position embeddings as a module (ops/rotary.h): rotates the query and key heads of the
// fused qkv in place by the angles of their global positions, before attention. Under sequence
// parallelism a rank holds runs of positions of the sequence (its BatchSlice), and
// rotates by those. Where the batch packs documents (Batch::positions), each token rotates by its
// position in its document. backward rotates the gradient back (a rotation's transpose is its
// inverse).
#pragma once

#include "nn/batch_slice.h"
#include "nn/module.h"
#include "ops/rotary.h"

#include <vector>

namespace tidal::nn {

struct RotaryConfig {
  double theta = 0.0;  // the base of the frequencies (Llama 2: 10000, Llama 3: 500000); 0 = none
  ops::RopeScaling scaling{};
};

class Rotary final : public Module {
 public:
  // n_head, n_kv_head: the heads this rank's qkv holds.
  Rotary(int n_head, int n_kv_head, std::int64_t head_dim, const RotaryConfig& cfg, BatchSlice positions);

  Tensor forward(const Tensor& qkv, Context& ctx) override;  // [B', T', (H' + 2 Hkv') hd], in place
  Tensor backward(const Tensor& dqkv, Context& ctx) override;

 private:
  // cos, sin fp32 on `like`'s device (kept between calls): [T', hd/2] for this rank's positions
  // or, for `by_token` (each token's position from the batch), [T, hd/2] for positions [0, T) of
  // the whole sequence.
  std::pair<Tensor, Tensor> tables(const Tensor& like, bool by_token);
  Tensor rotate(const Tensor& qkv, bool inverse, Context& ctx);

  ops::RotaryOptions opt_;
  std::vector<float> inv_freq_;  // [hd/2]
  BatchSlice positions_;
  Tensor cos_, sin_;  // the tables of the last positions and device asked for
  std::int64_t first_ = -1;  // their first position
  bool by_token_ = false;    // whether they are the whole sequence's
};

}  // namespace tidal::nn
