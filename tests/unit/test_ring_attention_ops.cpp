// Ring-attention blocks (ops/ring_attention.h) against the whole-sequence attention op
// (ops/attention.h, itself checked against PyTorch): a sequence of T positions is cut into N
// rank slices, every slice's queries meet every key block through the block ops, and the
// outputs, dq, and the dk and dv shares summed over slices equal the whole attention's, causal
// and with a padding mask, on odd shapes, with grouped-query heads (blocks Hkv heads wide).
#include "ops/attention.h"
#include "ops/ring_attention.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;

struct Case {
  std::int64_t B, T, C;
  int H, N;  // heads, ring positions
  bool causal, masked;
  int Hkv = 0;  // key / value heads; 0 = H
};

// Columns [c0, c0 + C) of rows [t0, t0 + n) of a [B, T, W] tensor, contiguous.
Tensor part(const Tensor& x, std::int64_t t0, std::int64_t n, std::int64_t c0, std::int64_t C) {
  return x.slice(1, t0, t0 + n).slice(2, c0, c0 + C).clone();
}

class RingAttentionOps : public ::testing::TestWithParam<Case> {};

TEST_P(RingAttentionOps, BlocksEqualWholeAttention) {
  const Case c = GetParam();
  const std::int64_t Tq = c.T / c.N, Hkv = c.Hkv == 0 ? c.H : c.Hkv, Ckv = Hkv * (c.C / c.H);
  const Tensor qkv = testing::randn({c.B, c.T, c.C + 2 * Ckv}, 11);
  const Tensor dy = testing::randn({c.B, c.T, c.C}, 12);
  Tensor mask = Tensor::empty({c.B, c.T}, DType::i32);
  for (std::int64_t i = 0; i < c.B * c.T; ++i)  // sample b has its last 2b + 1 positions padded
    mask.data<std::int32_t>()[i] = (i % c.T) < c.T - (2 * (i / c.T) + 1) ? 1 : 0;

  const ops::AttentionOptions whole{.n_head = c.H, .n_kv_head = int(Hkv), .causal = c.causal, .key_mask = c.masked ? &mask : nullptr};
  Tensor y = Tensor::empty({c.B, c.T, c.C}), lse = Tensor::empty({c.B, c.H, c.T});
  ops::attention_forward(y, lse, qkv, whole);
  Tensor dqkv = Tensor::empty(qkv.shape());
  ops::attention_backward(dqkv, dy, qkv, y, lse, whole);

  std::vector<Tensor> k, v, dk, dv;
  for (int r = 0; r < c.N; ++r) {
    k.push_back(part(qkv, r * Tq, Tq, c.C, Ckv));
    v.push_back(part(qkv, r * Tq, Tq, c.C + Ckv, Ckv));
    dk.push_back(Tensor::zeros({c.B, Tq, Ckv}));
    dv.push_back(Tensor::zeros({c.B, Tq, Ckv}));
  }
  for (int s = 0; s < c.N; ++s) {
    SCOPED_TRACE("ring position " + std::to_string(s));
    const ops::RingAttentionOptions opt{
        .n_head = c.H, .n_kv_head = int(Hkv), .causal = c.causal, .first_query = s * Tq, .key_mask = c.masked ? &mask : nullptr};
    const Tensor q = part(qkv, s * Tq, Tq, 0, c.C), g = part(dy, s * Tq, Tq, 0, c.C);
    Tensor p = Tensor::empty({c.B, c.H, Tq, c.T}), ys = Tensor::zeros({c.B, Tq, c.C});
    for (int r = 0; r < c.N; ++r) ops::attention_scores(p, q, k[r], r * Tq, opt);
    ops::attention_softmax(p, opt);
    for (int r = 0; r < c.N; ++r) ops::attention_values(ys, p, v[r], r * Tq, opt);
    EXPECT_TRUE(all_close(ys, part(y, s * Tq, Tq, 0, c.C), kFp32)) << "y";

    Tensor dp = Tensor::empty(p.shape()), dq = Tensor::zeros({c.B, Tq, c.C});
    for (int r = 0; r < c.N; ++r) {
      ops::attention_probs_grad(dp, g, v[r], r * Tq, opt);
      ops::attention_values_grad(dv[r], p, g, r * Tq, opt);
    }
    ops::attention_softmax_backward(dp, p);
    for (int r = 0; r < c.N; ++r) {
      ops::attention_query_grad(dq, dp, k[r], r * Tq, opt);
      ops::attention_key_grad(dk[r], dp, q, r * Tq, opt);
    }
    EXPECT_TRUE(all_close(dq, part(dqkv, s * Tq, Tq, 0, c.C), kFp32)) << "dq";
  }
  for (int r = 0; r < c.N; ++r) {
    EXPECT_TRUE(all_close(dk[r], part(dqkv, r * Tq, Tq, c.C, Ckv), kFp32)) << "dk of block " << r;
    EXPECT_TRUE(all_close(dv[r], part(dqkv, r * Tq, Tq, c.C + Ckv, Ckv), kFp32)) << "dv of block " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RingAttentionOps,
                         ::testing::Values(Case{2, 12, 10, 2, 3, false, false}, Case{2, 12, 10, 2, 3, true, false},
                                           Case{3, 12, 10, 2, 4, false, true}, Case{1, 15, 9, 3, 5, true, false},
                                           Case{2, 10, 6, 1, 2, false, true}, Case{2, 7, 6, 3, 1, true, false},
                                           // Grouped-query heads: 3 per kv head, one kv head (MQA).
                                           Case{2, 12, 12, 6, 3, true, true, 2}, Case{3, 12, 12, 6, 4, false, false, 2},
                                           Case{2, 15, 8, 4, 5, true, false, 1}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return fmt::format("B{}T{}C{}H{}kv{}N{}{}{}", c.B, c.T, c.C, c.H, c.Hkv == 0 ? c.H : c.Hkv,
                                              c.N, c.causal ? "causal" : "", c.masked ? "masked" : "");
                         });

}  // namespace
}  // namespace tidal
