// Attention (ops/attention.h) and the ring-attention pieces (ops/ring_attention.h) on the GPU
// against the CPU backend on the same inputs: forward (outputs and probabilities) and backward,
// causal and with a padding mask, fp32 and the 16-bit storage types, on odd sequence lengths and
// head widths; every ring piece at nonzero key offsets, with causally skipped blocks; and the
// backward twice, bitwise equal.
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/ring_attention.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>
#include <vector>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;
using testing::randn;
using testing::randn_as;
using testing::gpu_empty;
using testing::to_gpu;
using testing::to_host;

// fp32 (kFp32, 1e-5 + 1e-4 |ref|): the kernels sum every product in another order than OpenBLAS;
// PyTorch fp32 against fp64 on these shapes (T = 130, head width 128) differs by at most 2e-6 in
// y, the probabilities and dqkv, so the two backends by about twice that.
// 16-bit: both backends compute the fp32 values above and round once, so they differ by the fp32
// difference plus one 16-bit ulp (at most 2^-7 relative for bf16, 2^-10 for fp16, plus kFp32's
// 1e-4).
constexpr testing::Tolerance kBf16{1e-5, 8e-3};
constexpr testing::Tolerance kF16{1e-5, 1.1e-3};

testing::Tolerance tolerance_for(DType dtype) {
  return dtype == DType::f32 ? kFp32 : dtype == DType::bf16 ? kBf16 : kF16;
}

// [B, T] i32: sample b has its last 2b + 1 positions padded (all of them when T is short), and
// position 3 of sample 0 too, so a padded key sits between real ones.
Tensor padding_mask(std::int64_t B, std::int64_t T) {
  Tensor mask = Tensor::empty({B, T}, DType::i32);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      mask.data<std::int32_t>()[b * T + t] = t < T - (2 * b + 1) && !(b == 0 && t == 3) ? 1 : 0;
  return mask;
}


// ---- whole-sequence attention ----

using AttentionCase = std::tuple<DType, std::int64_t, std::int64_t, bool, bool>;  // dtype, T, head width, causal, masked

class CudaAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(CudaAttention, ForwardAndBackwardMatchCpu) {
  TIDAL_REQUIRE_GPU();
  const auto [dtype, T, hd, causal, masked] = GetParam();
  const std::int64_t B = 2, H = 3, C = H * hd;
  const Tensor qkv = randn_as({B, T, 3 * C}, 21, dtype), dy = randn_as({B, T, C}, 22, dtype);
  const Tensor mask = padding_mask(B, T), gmask = to_gpu(mask);
  const ops::AttentionOptions opt{.n_head = int(H), .causal = causal, .key_mask = masked ? &mask : nullptr};
  const ops::AttentionOptions gopt{.n_head = int(H), .causal = causal, .key_mask = masked ? &gmask : nullptr};

  Tensor y = Tensor::empty({B, T, C}, dtype), probs = Tensor::empty({B, H, T, T});
  Tensor dqkv = Tensor::empty(qkv.shape(), dtype);
  ops::attention_forward(y, probs, qkv, opt);
  ops::attention_backward(dqkv, dy, qkv, probs, opt);

  const Tensor gqkv = to_gpu(qkv), gdy = to_gpu(dy);
  Tensor gy = gpu_empty(y.shape(), dtype), gprobs = gpu_empty(probs.shape()), gdqkv = gpu_empty(qkv.shape(), dtype);
  ops::attention_forward(gy, gprobs, gqkv, gopt);
  EXPECT_TRUE(all_close(gy, y, tolerance_for(dtype))) << "y";
  EXPECT_TRUE(all_close(gprobs, probs, kFp32)) << "probs";
  // Backward from the CPU's probabilities: the same inputs on both sides.
  ops::attention_backward(gdqkv, gdy, gqkv, to_gpu(probs), gopt);
  EXPECT_TRUE(all_close(gdqkv, dqkv, tolerance_for(dtype))) << "dqkv";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16),
                                            ::testing::Values<std::int64_t>(1, 37, 130),
                                            ::testing::Values<std::int64_t>(64, 128, 40), ::testing::Bool(),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           const AttentionCase& c = info.param;
                           return fmt::format("{}_T{}_hd{}{}{}", dtype_name(std::get<0>(c)), std::get<1>(c),
                                              std::get<2>(c), std::get<3>(c) ? "_causal" : "",
                                              std::get<4>(c) ? "_masked" : "");
                         });

// Forward and backward twice on the same inputs: the same bits (tidal compares losses bitwise
// between GPU runs).
class CudaAttentionDeterminism : public ::testing::TestWithParam<DType> {};

TEST_P(CudaAttentionDeterminism, RepeatedRunsAreBitwiseEqual) {
  TIDAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const std::int64_t B = 2, T = 130, H = 3, C = H * 40;
  const Tensor gqkv = to_gpu(randn_as({B, T, 3 * C}, 23, dtype)), gdy = to_gpu(randn_as({B, T, C}, 24, dtype));
  const Tensor gmask = to_gpu(padding_mask(B, T));
  const ops::AttentionOptions opt{.n_head = int(H), .causal = true, .key_mask = &gmask};
  std::vector<Tensor> runs;  // y, probs, dqkv of each run, on the host
  for (int run = 0; run < 2; ++run) {
    Tensor y = gpu_empty({B, T, C}, dtype), probs = gpu_empty({B, H, T, T}), dqkv = gpu_empty(gqkv.shape(), dtype);
    ops::attention_forward(y, probs, gqkv, opt);
    ops::attention_backward(dqkv, gdy, gqkv, probs, opt);
    for (const Tensor* t : {&y, &probs, &dqkv}) runs.push_back(to_host(*t));
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(runs[i].nbytes(), runs[i + 3].nbytes());
    EXPECT_EQ(std::memcmp(runs[i].raw(), runs[i + 3].raw(), runs[i].nbytes()), 0) << "output " << i << " differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttentionDeterminism, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- ring-attention pieces ----

struct RingCase {
  std::int64_t B, T;
  int H;
  std::int64_t hd, first_query, Tq;
  std::vector<std::int64_t> cuts;  // key blocks [cuts[r], cuts[r + 1])
  bool causal, masked;
};

class CudaRingAttention : public ::testing::TestWithParam<RingCase> {};

// Each piece runs on the CPU and, on copies of the same inputs, on the GPU; accumulating pieces
// start from nonzero outputs, and dprobs starts nonzero so a skipped block must be zeroed.
TEST_P(CudaRingAttention, EveryPieceMatchesCpu) {
  TIDAL_REQUIRE_GPU();
  const RingCase c = GetParam();
  const std::int64_t C = c.H * c.hd, blocks = std::int64_t(c.cuts.size()) - 1;
  const Tensor mask = padding_mask(c.B, c.T), gmask = to_gpu(mask);
  const ops::RingAttentionOptions opt{
      .n_head = c.H, .causal = c.causal, .first_query = c.first_query, .key_mask = c.masked ? &mask : nullptr};
  const ops::RingAttentionOptions gopt{
      .n_head = c.H, .causal = c.causal, .first_query = c.first_query, .key_mask = c.masked ? &gmask : nullptr};
  const Tensor q = randn({c.B, c.Tq, C}, 31), dy = randn({c.B, c.Tq, C}, 32);
  const Tensor gq = to_gpu(q), gdy = to_gpu(dy);
  std::vector<Tensor> k, v, gk, gv;
  for (std::int64_t r = 0; r < blocks; ++r) {
    const std::int64_t Tk = c.cuts[r + 1] - c.cuts[r];
    k.push_back(randn({c.B, Tk, C}, 40 + r));
    v.push_back(randn({c.B, Tk, C}, 60 + r));
    gk.push_back(to_gpu(k.back()));
    gv.push_back(to_gpu(v.back()));
  }

  // Zeros, so columns of skipped blocks agree too.
  Tensor probs = Tensor::zeros({c.B, c.H, c.Tq, c.T}), gprobs = to_gpu(probs);
  for (std::int64_t r = 0; r < blocks; ++r) {
    ops::attention_scores(probs, q, k[r], c.cuts[r], opt);
    ops::attention_scores(gprobs, gq, gk[r], c.cuts[r], gopt);
  }
  EXPECT_TRUE(all_close(gprobs, probs, kFp32)) << "attention_scores";

  gprobs = to_gpu(probs);
  ops::attention_softmax(probs, opt);
  ops::attention_softmax(gprobs, gopt);
  EXPECT_TRUE(all_close(gprobs, probs, kFp32)) << "attention_softmax";
  gprobs = to_gpu(probs);

  Tensor y = randn({c.B, c.Tq, C}, 33), gy = to_gpu(y);
  Tensor dprobs = Tensor::full(probs.shape(), 7.0f), gdprobs = to_gpu(dprobs);
  for (std::int64_t r = 0; r < blocks; ++r) {
    SCOPED_TRACE(fmt::format("key block at {}", c.cuts[r]));
    ops::attention_values(y, probs, v[r], c.cuts[r], opt);
    ops::attention_values(gy, gprobs, gv[r], c.cuts[r], gopt);
    ops::attention_probs_grad(dprobs, dy, v[r], c.cuts[r], opt);
    ops::attention_probs_grad(gdprobs, gdy, gv[r], c.cuts[r], gopt);
    Tensor dv = randn(v[r].shape(), 80 + r), gdv = to_gpu(dv);
    ops::attention_values_grad(dv, probs, dy, c.cuts[r], opt);
    ops::attention_values_grad(gdv, gprobs, gdy, c.cuts[r], gopt);
    EXPECT_TRUE(all_close(gdv, dv, kFp32)) << "attention_values_grad";
  }
  EXPECT_TRUE(all_close(gy, y, kFp32)) << "attention_values";
  EXPECT_TRUE(all_close(gdprobs, dprobs, kFp32)) << "attention_probs_grad";

  gdprobs = to_gpu(dprobs);
  ops::attention_softmax_backward(dprobs, probs);
  ops::attention_softmax_backward(gdprobs, gprobs);
  EXPECT_TRUE(all_close(gdprobs, dprobs, kFp32)) << "attention_softmax_backward";
  const Tensor gdscores = to_gpu(dprobs);

  Tensor dq = randn({c.B, c.Tq, C}, 34), gdq = to_gpu(dq);
  for (std::int64_t r = 0; r < blocks; ++r) {
    SCOPED_TRACE(fmt::format("key block at {}", c.cuts[r]));
    ops::attention_query_grad(dq, dprobs, k[r], c.cuts[r], opt);
    ops::attention_query_grad(gdq, gdscores, gk[r], c.cuts[r], gopt);
    Tensor dk = randn(k[r].shape(), 100 + r), gdk = to_gpu(dk);
    ops::attention_key_grad(dk, dprobs, q, c.cuts[r], opt);
    ops::attention_key_grad(gdk, gdscores, gq, c.cuts[r], gopt);
    EXPECT_TRUE(all_close(gdk, dk, kFp32)) << "attention_key_grad";
  }
  EXPECT_TRUE(all_close(gdq, dq, kFp32)) << "attention_query_grad";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaRingAttention,
    ::testing::Values(
        // Middle queries, uneven key blocks; causal skips the block at 100.
        RingCase{2, 130, 3, 40, 50, 37, {0, 17, 60, 100, 130}, true, true},
        RingCase{2, 130, 3, 64, 50, 37, {0, 17, 60, 100, 130}, false, false},
        // The last rank's queries: every block is (partly) visible.
        RingCase{2, 111, 3, 128, 74, 37, {0, 37, 74, 111}, true, false},
        // The first rank's queries: the blocks at 37 and 74 are skipped.
        RingCase{2, 111, 3, 128, 0, 37, {0, 37, 74, 111}, true, true},
        // One rank holding the whole sequence.
        RingCase{1, 37, 3, 40, 0, 37, {0, 37}, true, true}),
    [](const auto& info) {
      const RingCase& c = info.param;
      return fmt::format("B{}T{}H{}hd{}q{}x{}K{}{}{}", c.B, c.T, c.H, c.hd, c.first_query, c.Tq, c.cuts.size() - 1,
                         c.causal ? "causal" : "", c.masked ? "masked" : "");
    });

}  // namespace
}  // namespace tidal
