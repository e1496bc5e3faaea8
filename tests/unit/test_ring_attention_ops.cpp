// Flash-style ring-attention blocks (ops/ring_attention.h) against the whole-sequence attention
// op (ops/attention.h, itself checked against PyTorch): a sequence of T positions is cut into N
// rank slices, every slice's queries meet every key/value block in the ring's order through the
// block ops, and the outputs, the log-sum-exp, dq, and the dk and dv shares summed over slices
// equal the whole attention's, causal and with a padding mask, on odd shapes, with grouped-query
// heads (blocks Hkv heads wide), and with packed documents (ends inside, before and after slices).
#include "ops/attention.h"
#include "ops/ring_attention.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;

struct Case {
  std::int64_t B, T, C;
  int H, N;  // heads, ring positions
  bool causal, masked;
  int Hkv = 0;  // key / value heads; 0 = H
  bool documents = false;
};

// Positions in packed documents [B, T]: sample b's documents start every 3 + 2b + (t / 5) % 4
// positions or so, and sample 0 starts inside one (position 3).
Tensor packed_documents(std::int64_t B, std::int64_t T) {
  Tensor docs = Tensor::empty({B, T}, DType::i32);
  for (std::int64_t b = 0; b < B; ++b) {
    std::int32_t pos = b == 0 ? 3 : 0, length = 3 + 2 * std::int32_t(b);
    for (std::int64_t t = 0; t < T; ++t) {
      if (t > 0 && pos >= length) {
        pos = 0;
        length = 3 + 2 * std::int32_t(b) + std::int32_t(t / 5 % 4) + std::int32_t(t % 7 == 0 ? 40 : 0);
      }
      docs.data<std::int32_t>()[b * T + t] = pos++;
    }
  }
  return docs;
}

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

  const Tensor docs = packed_documents(c.B, c.T);
  const ops::AttentionOptions whole{.n_head = c.H,
                                    .n_kv_head = int(Hkv),
                                    .causal = c.causal,
                                    .key_mask = c.masked ? &mask : nullptr,
                                    .doc_positions = c.documents ? &docs : nullptr};
  Tensor y = Tensor::empty({c.B, c.T, c.C}), lse = Tensor::empty({c.B, c.H, c.T});
  ops::attention_forward(y, lse, qkv, whole);
  Tensor dqkv = Tensor::empty(qkv.shape());
  ops::attention_backward(dqkv, dy, qkv, y, lse, whole);

  std::vector<Tensor> kv, dkv;
  for (int r = 0; r < c.N; ++r) {
    kv.push_back(part(qkv, r * Tq, Tq, c.C, 2 * Ckv));
    dkv.push_back(Tensor::zeros({c.B, Tq, 2 * Ckv}));
  }
  for (int s = 0; s < c.N; ++s) {
    SCOPED_TRACE("ring position " + std::to_string(s));
    const ops::RingAttentionOptions opt{.n_head = c.H,
                                        .n_kv_head = int(Hkv),
                                        .causal = c.causal,
                                        .first_query = s * Tq,
                                        .key_mask = c.masked ? &mask : nullptr,
                                        .doc_positions = c.documents ? &docs : nullptr};
    const Tensor q = part(qkv, s * Tq, Tq, 0, c.C), g = part(dy, s * Tq, Tq, 0, c.C);
    Tensor ys = Tensor::zeros({c.B, Tq, c.C}), ls = Tensor::full({c.B, c.H, Tq}, -INFINITY),
           sum = Tensor::zeros({c.B, c.H, Tq});
    // The blocks in the ring's order for this position: its own first, then its predecessors'.
    for (int i = 0; i < c.N; ++i) {
      const int r = (s - i + c.N) % c.N;
      ops::ring_attention_forward(ys, ls, sum, q, kv[r], r * Tq, opt);
    }
    ops::ring_attention_finish(ys, ls, sum, opt);
    EXPECT_TRUE(all_close(ys, part(y, s * Tq, Tq, 0, c.C), kFp32)) << "y";
    const Tensor whole_lse = lse.slice(2, s * Tq, (s + 1) * Tq).clone();
    EXPECT_TRUE(all_close(ls, whole_lse, kFp32)) << "lse";

    Tensor dq = Tensor::zeros({c.B, Tq, c.C});
    for (int r = 0; r < c.N; ++r) ops::ring_attention_backward(dq, dkv[r], q, kv[r], ys, g, ls, r * Tq, opt);
    EXPECT_TRUE(all_close(dq, part(dqkv, s * Tq, Tq, 0, c.C), kFp32)) << "dq";
  }
  for (int r = 0; r < c.N; ++r)
    EXPECT_TRUE(all_close(dkv[r], part(dqkv, r * Tq, Tq, c.C, 2 * Ckv), kFp32)) << "dk, dv of block " << r;
}

// A zig-zag rank passes its runs of positions as views (slices along the positions): the results
// equal those of contiguous copies, bitwise.
TEST(RingAttentionOps, RunsPassedAsViewsEqualContiguousCopies) {
  const std::int64_t B = 2, L = 5, C = 8;
  const Tensor q = testing::randn({B, 2 * L, C}, 21), kv = testing::randn({B, 2 * L, 2 * C}, 22),
               dy = testing::randn({B, 2 * L, C}, 23);
  const ops::RingAttentionOptions opt{.n_head = 2, .causal = true, .first_query = 30};
  const auto run = [](const Tensor& t, int dim) { return t.slice(dim, L, 2 * L); };  // the second run
  // Views into whole tensors, the second run of queries against the first run of keys at 27.
  Tensor y = Tensor::zeros({B, 2 * L, C}), lse = Tensor::full({B, 2, 2 * L}, -INFINITY), sum = Tensor::zeros(lse.shape());
  Tensor yv = run(y, 1), lv = run(lse, 2), sv = run(sum, 2);
  ops::ring_attention_forward(yv, lv, sv, run(q, 1), kv.slice(1, 0, L), 27, opt);
  ops::ring_attention_finish(yv, lv, sv, opt);
  Tensor dq = Tensor::zeros(q.shape()), dkv = Tensor::zeros(kv.shape()), dqv = run(dq, 1), dkvv = dkv.slice(1, 0, L);
  ops::ring_attention_backward(dqv, dkvv, run(q, 1), kv.slice(1, 0, L), yv, run(dy, 1), lv, 27, opt);
  // The same on contiguous copies.
  Tensor y2 = Tensor::zeros({B, L, C}), lse2 = Tensor::full({B, 2, L}, -INFINITY), sum2 = Tensor::zeros(lse2.shape());
  const Tensor q2 = run(q, 1).clone(), kv2 = kv.slice(1, 0, L).clone(), dy2 = run(dy, 1).clone();
  ops::ring_attention_forward(y2, lse2, sum2, q2, kv2, 27, opt);
  ops::ring_attention_finish(y2, lse2, sum2, opt);
  Tensor dq2 = Tensor::zeros(q2.shape()), dkv2 = Tensor::zeros(kv2.shape());
  ops::ring_attention_backward(dq2, dkv2, q2, kv2, y2, dy2, lse2, 27, opt);
  EXPECT_TRUE(all_close(yv.clone(), y2, {0.0, 0.0})) << "y";
  EXPECT_TRUE(all_close(lv.clone(), lse2, {0.0, 0.0})) << "lse";
  EXPECT_TRUE(all_close(dqv.clone(), dq2, {0.0, 0.0})) << "dq";
  EXPECT_TRUE(all_close(dkvv.clone(), dkv2, {0.0, 0.0})) << "dkv";
  // The other run's rows are untouched.
  for (std::int64_t i = 0; i < B; ++i)
    for (std::int64_t c = 0; c < C; ++c) EXPECT_EQ(y.data<float>()[(i * 2 * L) * C + c], 0.0f);
}

// A query with no real key in any block: zero output, lse = +inf, and no gradient to the keys
// and values (as ops::attention_forward / backward).
TEST(RingAttentionOps, AFullyMaskedRowHasZeroOutputAndInfiniteLse) {
  const Tensor q = testing::randn({1, 4, 8}, 3), kv = testing::randn({1, 4, 16}, 4);
  Tensor mask = Tensor::zeros({1, 8}, DType::i32);
  const ops::RingAttentionOptions opt{.n_head = 2, .causal = false, .first_query = 4, .key_mask = &mask};
  Tensor y = Tensor::zeros({1, 4, 8}), lse = Tensor::full({1, 2, 4}, -INFINITY), sum = Tensor::zeros({1, 2, 4});
  ops::ring_attention_forward(y, lse, sum, q, kv, 0, opt);
  ops::ring_attention_forward(y, lse, sum, q, kv, 4, opt);
  ops::ring_attention_finish(y, lse, sum, opt);
  for (std::int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.data<float>()[i], 0.0f);
  for (std::int64_t i = 0; i < lse.numel(); ++i) EXPECT_EQ(lse.data<float>()[i], INFINITY);
  Tensor dq = Tensor::zeros(q.shape()), dkv = Tensor::zeros(kv.shape());
  ops::ring_attention_backward(dq, dkv, q, kv, y, testing::randn({1, 4, 8}, 5), lse, 0, opt);
  for (std::int64_t i = 0; i < dkv.numel(); ++i) EXPECT_EQ(dkv.data<float>()[i], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RingAttentionOps,
                         ::testing::Values(Case{2, 12, 10, 2, 3, false, false}, Case{2, 12, 10, 2, 3, true, false},
                                           Case{3, 12, 10, 2, 4, false, true}, Case{1, 15, 9, 3, 5, true, false},
                                           Case{2, 10, 6, 1, 2, false, true}, Case{2, 7, 6, 3, 1, true, false},
                                           // Grouped-query heads: 3 per kv head, one kv head (MQA).
                                           Case{2, 12, 12, 6, 3, true, true, 2}, Case{3, 12, 12, 6, 4, false, false, 2},
                                           Case{2, 15, 8, 4, 5, true, false, 1},
                                           // Slices longer than a CPU tile of 64 queries.
                                           Case{1, 200, 16, 2, 2, true, true}, Case{2, 150, 8, 2, 2, false, true, 1},
                                           // Packed documents.
                                           Case{2, 12, 10, 2, 3, true, false, 0, true},
                                           Case{3, 12, 10, 2, 4, false, true, 0, true},
                                           Case{2, 12, 12, 6, 3, true, true, 2, true},
                                           Case{1, 200, 16, 2, 2, true, true, 0, true},
                                           Case{2, 150, 8, 2, 2, false, false, 1, true}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return fmt::format("B{}T{}C{}H{}kv{}N{}{}{}{}", c.B, c.T, c.C, c.H, c.Hkv == 0 ? c.H : c.Hkv,
                                              c.N, c.causal ? "causal" : "", c.masked ? "masked" : "",
                                              c.documents ? "documents" : "");
                         });

}  // namespace
}  // namespace tidal
