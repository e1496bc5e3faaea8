// Every CPU op family, forward and backward, against PyTorch on the same inputs (odd shapes).
#include "ops/attention.h"
#include "ops/bias.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/gelu.h"
#include "ops/gemm.h"
#include "ops/grad_norm.h"
#include "ops/layernorm.h"
#include "ops/nf4.h"
#include "ops/optimizer_step.h"
#include "ops/softmax.h"
#include "support/oracle.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;
using testing::randint;
using testing::randn;
using testing::run_oracle;

TEST(OpsOracle, GemmAllTransposesAndBatched) {
  const std::int64_t m = 37, n = 29, k = 72, batch = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (bool batched : {false, true}) {
        Shape sa = ta ? Shape{k, m} : Shape{m, k}, sb = tb ? Shape{n, k} : Shape{k, n}, sc{m, n};
        if (batched) {
          sa = Shape{batch, sa[0], sa[1]};
          sb = Shape{batch, sb[0], sb[1]};
          sc = Shape{batch, m, n};
        }
        Tensor a = randn(sa, 1), b = randn(sb, 2), c0 = randn(sc, 3);
        Tensor c = c0.clone();
        const ops::GemmOptions opt{.trans_a = bool(ta), .trans_b = bool(tb), .alpha = 0.75f, .beta = 0.5f};
        ops::gemm(c, a, b, opt);
        auto ref = run_oracle("gemm", {{"A", a}, {"B", b}, {"C0", c0}},
                              {{"transa", std::to_string(ta)}, {"transb", std::to_string(tb)}, {"alpha", "0.75"}, {"beta", "0.5"}});
        EXPECT_TRUE(all_close(c, ref.at("C"), kFp32)) << "trans " << ta << tb << " batched " << batched;
      }
}

TEST(OpsOracle, GemmBf16AndF16OperandsWidenToFp32) {
  Tensor a = randn({19, 40}, 4), b = randn({40, 23}, 5);
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor a16 = Tensor::empty(a.shape(), dt), b16 = Tensor::empty(b.shape(), dt), c16 = Tensor::empty({19, 23}, dt);
    ops::cast(a16, a);
    ops::cast(b16, b);
    ops::gemm(c16, a16, b16);
    // Reference: the same rounded operands in fp32, result rounded once.
    Tensor ar = Tensor::empty(a.shape()), br = Tensor::empty(b.shape()), c = Tensor::empty({19, 23});
    ops::cast(ar, a16);
    ops::cast(br, b16);
    auto ref = run_oracle("gemm", {{"A", ar}, {"B", br}}, {{"transa", "0"}, {"transb", "0"}, {"alpha", "1"}, {"beta", "0"}});
    // One rounding of the result to 8 (bf16) or 11 (fp16) significant bits.
    const double rtol = dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
    EXPECT_TRUE(all_close(c16, ref.at("C"), {1e-4, rtol})) << dtype_name(dt);
  }
}

// GemmOptions::bias on the CPU: the product, then ops::bias_add - the same bits as the two ops
// (fp32 and bf16 c); in fp32 within tolerance of PyTorch's product a b^T plus the bias.
TEST(OpsOracle, GemmWithBiasIsTheProductThenTheBias) {
  const Tensor a = randn({19, 40}, 9), b = randn({23, 40}, 10), bias = randn({23}, 11);
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor a_t = Tensor::empty(a.shape(), dt), b_t = Tensor::empty(b.shape(), dt), bias_t = Tensor::empty({23}, dt);
    ops::cast(a_t, a);
    ops::cast(b_t, b);
    ops::cast(bias_t, bias);
    Tensor fused = Tensor::empty({19, 23}, dt), two_ops = Tensor::empty({19, 23}, dt);
    ops::gemm(fused, a_t, b_t, {.trans_b = true, .bias = &bias_t});
    ops::gemm(two_ops, a_t, b_t, {.trans_b = true});
    ops::bias_add(two_ops, bias_t);
    EXPECT_TRUE(all_close(fused, two_ops, {0.0, 0.0})) << dtype_name(dt);
  }
  Tensor c = Tensor::empty({19, 23});
  ops::gemm(c, a, b, {.trans_b = true, .bias = &bias});
  auto ref = run_oracle("gemm", {{"A", a}, {"B", b}}, {{"transa", "0"}, {"transb", "1"}, {"alpha", "1"}, {"beta", "0"}});
  Tensor expected = ref.at("C").clone();
  ops::bias_add(expected, bias);
  EXPECT_TRUE(all_close(c, expected, kFp32));
}

TEST(OpsOracle, BiasAddAndGrad) {
  Tensor x = randn({37, 72}, 6), b = randn({72}, 7), dy = randn({37, 72}, 8);
  Tensor y = x.clone(), db = Tensor::zeros({72});
  ops::bias_add(y, b);
  ops::bias_grad(db, dy);
  auto ref = run_oracle("bias", {{"x", x}, {"b", b}, {"dy", dy}});
  EXPECT_TRUE(all_close(y, ref.at("y"), kFp32));
  EXPECT_TRUE(all_close(db, ref.at("db"), kFp32));
}

TEST(OpsOracle, LayerNormForwardBackward) {
  const std::int64_t N = 37, C = 72;
  Tensor x = randn({N, C}, 9, 2.0f), w = randn({C}, 10), b = randn({C}, 11), dy = randn({N, C}, 12);
  Tensor y = Tensor::empty({N, C}), mean = Tensor::empty({N}), rstd = Tensor::empty({N});
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  Tensor dx = Tensor::empty({N, C}), dw = Tensor::zeros({C}), db = Tensor::zeros({C});
  ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
  auto ref = run_oracle("layernorm", {{"x", x}, {"w", w}, {"b", b}, {"dy", dy}}, {{"eps", "1e-5"}});
  EXPECT_TRUE(all_close(y, ref.at("y"), kFp32));
  EXPECT_TRUE(all_close(mean, ref.at("mean"), kFp32));
  EXPECT_TRUE(all_close(rstd, ref.at("rstd"), kFp32));
  EXPECT_TRUE(all_close(dx, ref.at("dx"), kFp32));
  EXPECT_TRUE(all_close(dw, ref.at("dw"), kFp32));
  EXPECT_TRUE(all_close(db, ref.at("db"), kFp32));
}

TEST(OpsOracle, GeluTanhForwardBackward) {
  Tensor x = randn({37, 101}, 13, 3.0f), dy = randn({37, 101}, 14);
  Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
  ops::gelu_forward(y, x);
  ops::gelu_backward(dx, dy, x);
  auto ref = run_oracle("gelu", {{"x", x}, {"dy", dy}});
  EXPECT_TRUE(all_close(y, ref.at("y"), kFp32));
  EXPECT_TRUE(all_close(dx, ref.at("dx"), kFp32));
}

// BERT's and ViT's GELU: 0.5 x (1 + erf(x / sqrt(2))).
TEST(OpsOracle, GeluErfForwardBackward) {
  Tensor x = randn({37, 101}, 17, 3.0f), dy = randn({37, 101}, 18);
  Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
  ops::gelu_forward(y, x, ops::GeluForm::erf);
  ops::gelu_backward(dx, dy, x, ops::GeluForm::erf);
  auto ref = run_oracle("gelu", {{"x", x}, {"dy", dy}}, {{"form", "erf"}});
  EXPECT_TRUE(all_close(y, ref.at("y"), kFp32));
  EXPECT_TRUE(all_close(dx, ref.at("dx"), kFp32));
}

TEST(OpsOracle, SoftmaxForwardBackward) {
  Tensor x = randn({37, 101}, 15, 4.0f), dy = randn({37, 101}, 16);
  Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
  ops::softmax_forward(y, x);
  ops::softmax_backward(dx, dy, y);
  auto ref = run_oracle("softmax", {{"x", x}, {"dy", dy}});
  EXPECT_TRUE(all_close(y, ref.at("y"), kFp32));
  EXPECT_TRUE(all_close(dx, ref.at("dx"), kFp32));
}

TEST(OpsOracle, AttentionCausalAndPadding) {
  // T 37 fits one block of queries; T 150 spans three (the last partial), with padding that
  // ends inside the second.
  for (const std::int64_t T : {37, 150}) {
    const std::int64_t B = 3, C = 72;
    const int H = 3;
    Tensor qkv = randn({B, T, 3 * C}, 17), dy = randn({B, T, C}, 18);
    // Padding at the end of samples 1 and 2 (as BERT batches have).
    Tensor mask = Tensor::empty({B, T}, DType::i32);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) mask.data<std::int32_t>()[b * T + t] = t < T - (T / 8) * b ? 1 : 0;
    for (bool causal : {true, false})
      for (bool padded : {false, true}) {
        const ops::AttentionOptions opt{.n_head = H, .causal = causal, .key_mask = padded ? &mask : nullptr};
        Tensor y = Tensor::empty({B, T, C}), lse = Tensor::empty({B, H, T}), dqkv = Tensor::empty(qkv.shape());
        ops::attention_forward(y, lse, qkv, opt);
        ops::attention_backward(dqkv, dy, qkv, y, lse, opt);
        io::TensorMap in{{"qkv", qkv}, {"dy", dy}};
        if (padded) in.emplace("key_mask", mask);
        auto ref = run_oracle("attention", in, {{"n_head", std::to_string(H)}, {"causal", causal ? "1" : "0"}});
        const std::string what = fmt::format("T {} causal {} padded {}", T, causal, padded);
        EXPECT_TRUE(all_close(y, ref.at("y"), kFp32)) << what;
        EXPECT_TRUE(all_close(lse, ref.at("lse"), kFp32)) << what;
        EXPECT_TRUE(all_close(dqkv, ref.at("dqkv"), kFp32)) << what;
      }
  }
}

// bf16 attention (ops/cpu/attention.cpp: its block products on MKL's bf16 GEMM, or oneDNN's, or
// widened to fp32, as TIDAL_CPU_GEMM and the CPU choose) against PyTorch's fp32 attention of the
// same rounded inputs: grouped heads, 64-wide heads, T 150 over three blocks of queries, causal or
// with padded keys. The kernel rounds P and dS to bf16 before they multiply and its outputs once;
// measured worst differences on the AMX VM (MKL, oneDNN and widened alike): y 8.1e-3 at 3.39, dqkv
// 1.75e-2 at 5.80 (under one bf16 step there) and 1.1e-2 at 0.054 (dS rounded to bf16 times keys
// of order 1); the tolerance is a step (1/128 of the value) plus 2e-2.
TEST(OpsOracle, AttentionInBf16) {
  const std::int64_t B = 2, T = 150, hd = 64;
  const int H = 4, Hkv = 2;
  const std::int64_t C = H * hd;
  Tensor mask = Tensor::empty({B, T}, DType::i32);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t) mask.data<std::int32_t>()[b * T + t] = b == 1 && t >= T - 20 ? 0 : 1;
  const auto rounded = [](const Tensor& x) {
    Tensor r = Tensor::empty(x.shape(), DType::bf16);
    ops::cast(r, x);
    return r;
  };
  const auto widened = [](const Tensor& x) {
    Tensor w = Tensor::empty(x.shape());
    ops::cast(w, x);
    return w;
  };
  const Tensor qkv = rounded(randn({B, T, (H + 2 * Hkv) * hd}, 51)), dy = rounded(randn({B, T, C}, 52));
  for (bool causal : {true, false}) {
    const ops::AttentionOptions opt{.n_head = H, .n_kv_head = Hkv, .causal = causal, .key_mask = causal ? nullptr : &mask};
    Tensor y = Tensor::empty({B, T, C}, DType::bf16), lse = Tensor::empty({B, H, T});
    Tensor dqkv = Tensor::empty(qkv.shape(), DType::bf16);
    ops::attention_forward(y, lse, qkv, opt);
    ops::attention_backward(dqkv, dy, qkv, y, lse, opt);
    io::TensorMap in{{"qkv", widened(qkv)}, {"dy", widened(dy)}};
    if (!causal) in.emplace("key_mask", mask);
    auto ref = run_oracle("attention", in,
                          {{"n_head", std::to_string(H)}, {"n_kv_head", std::to_string(Hkv)}, {"causal", causal ? "1" : "0"}});
    const testing::Tolerance bf16{2e-2, 1.0 / 128};
    EXPECT_TRUE(all_close(widened(y), ref.at("y"), bf16)) << "causal " << causal;
    EXPECT_TRUE(all_close(lse, ref.at("lse"), {1e-3, 1e-3})) << "causal " << causal;
    EXPECT_TRUE(all_close(widened(dqkv), ref.at("dqkv"), bf16)) << "causal " << causal;
  }
}

// Grouped-query attention (ops/attention.h): H = 6 query heads over every kv head count that
// divides them (6 is plain multi-head, 1 multi-query), so a kv head's dk and dv sum over 1, 2, 3
// or 6 query heads. T 37 fits one block of queries, T 150 spans three (the CPU sums dk and dv
// over query blocks inside a head and over heads inside a group); head widths 16 and 24.
TEST(OpsOracle, AttentionGroupedQueryHeads) {
  struct Case {
    std::int64_t T, hd;
    int Hkv;
  };
  const std::int64_t B = 2;
  const int H = 6;
  for (const Case c : {Case{37, 16, 1}, Case{37, 16, 2}, Case{37, 16, 3}, Case{37, 16, 6}, Case{37, 24, 2},
                       Case{150, 16, 2}}) {
    const std::int64_t C = H * c.hd;
    Tensor qkv = randn({B, c.T, (H + 2 * c.Hkv) * c.hd}, 31), dy = randn({B, c.T, C}, 32);
    // Sample 1 pads its last 5 positions and position 2 (a padded key between real ones).
    Tensor mask = Tensor::empty({B, c.T}, DType::i32);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < c.T; ++t)
        mask.data<std::int32_t>()[b * c.T + t] = b == 1 && (t == 2 || t >= c.T - 5) ? 0 : 1;
    for (const auto& [causal, padded] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
      const ops::AttentionOptions opt{
          .n_head = H, .n_kv_head = c.Hkv, .causal = causal, .key_mask = padded ? &mask : nullptr};
      Tensor y = Tensor::empty({B, c.T, C}), lse = Tensor::empty({B, H, c.T}), dqkv = Tensor::empty(qkv.shape());
      ops::attention_forward(y, lse, qkv, opt);
      ops::attention_backward(dqkv, dy, qkv, y, lse, opt);
      io::TensorMap in{{"qkv", qkv}, {"dy", dy}};
      if (padded) in.emplace("key_mask", mask);
      auto ref = run_oracle("attention", in,
                            {{"n_head", std::to_string(H)},
                             {"n_kv_head", std::to_string(c.Hkv)},
                             {"causal", causal ? "1" : "0"}});
      const std::string what =
          fmt::format("T {} hd {} Hkv {} causal {} padded {}", c.T, c.hd, c.Hkv, causal, padded);
      EXPECT_TRUE(all_close(y, ref.at("y"), kFp32)) << what;
      EXPECT_TRUE(all_close(lse, ref.at("lse"), kFp32)) << what;
      EXPECT_TRUE(all_close(dqkv, ref.at("dqkv"), kFp32)) << what;
    }
  }
}

// Packed documents (AttentionOptions::doc_positions): a query attends only its own document's
// keys. Sample 0 starts inside a document (its first position 5, as a window cut from a corpus
// starts) and holds a document of one token; sample 1's documents end on, before and after the
// CPU's 64-query blocks, and its last positions are padding too. Grouped heads, causal or not.
TEST(OpsOracle, AttentionPackedDocuments) {
  const std::int64_t B = 2, hd = 8;
  const int H = 4, Hkv = 2;
  for (const std::int64_t T : {37, 150}) {
    const std::int64_t C = H * hd;
    Tensor qkv = randn({B, T, (H + 2 * Hkv) * hd}, 41), dy = randn({B, T, C}, 42);
    Tensor docs = Tensor::empty({B, T}, DType::i32), mask = Tensor::empty({B, T}, DType::i32);
    const std::vector<std::vector<std::int64_t>> starts{{0, 9, 10, 30, 100}, {0, 3, 64, 70, 127, 128, 140}};
    for (std::int64_t b = 0; b < B; ++b) {
      std::int32_t pos = b == 0 ? 5 : 0;
      for (std::int64_t t = 0; t < T; ++t) {
        const auto& s = starts[std::size_t(b)];
        if (t > 0 && std::find(s.begin(), s.end(), t) != s.end()) pos = 0;
        docs.data<std::int32_t>()[b * T + t] = pos++;
        mask.data<std::int32_t>()[b * T + t] = b == 1 && t >= T - 4 ? 0 : 1;
      }
    }
    for (bool causal : {true, false})
      for (bool padded : {false, true}) {
        const ops::AttentionOptions opt{.n_head = H,
                                        .n_kv_head = Hkv,
                                        .causal = causal,
                                        .key_mask = padded ? &mask : nullptr,
                                        .doc_positions = &docs};
        Tensor y = Tensor::empty({B, T, C}), lse = Tensor::empty({B, H, T}), dqkv = Tensor::empty(qkv.shape());
        ops::attention_forward(y, lse, qkv, opt);
        ops::attention_backward(dqkv, dy, qkv, y, lse, opt);
        io::TensorMap in{{"qkv", qkv}, {"dy", dy}, {"doc_positions", docs}};
        if (padded) in.emplace("key_mask", mask);
        auto ref = run_oracle("attention", in,
                              {{"n_head", std::to_string(H)},
                               {"n_kv_head", std::to_string(Hkv)},
                               {"causal", causal ? "1" : "0"}});
        const std::string what = fmt::format("T {} causal {} padded {}", T, causal, padded);
        EXPECT_TRUE(all_close(y, ref.at("y"), kFp32)) << what;
        EXPECT_TRUE(all_close(lse, ref.at("lse"), kFp32)) << what;
        EXPECT_TRUE(all_close(dqkv, ref.at("dqkv"), kFp32)) << what;
      }
  }
}

// n_head must be a multiple of n_kv_head: a configuration error, reported as one.
TEST(OpsOracle, AttentionRejectsKvHeadsThatDoNotDivideTheQueryHeads) {
  const std::int64_t B = 1, T = 5, hd = 4;
  const int H = 6, Hkv = 4;
  Tensor qkv = randn({B, T, (H + 2 * Hkv) * hd}, 33), y = Tensor::empty({B, T, H * hd}),
         lse = Tensor::empty({B, H, T});
  EXPECT_THROW(ops::attention_forward(y, lse, qkv, {.n_head = H, .n_kv_head = Hkv}), Error);
}

// A sample whose keys are all padding: its queries attend nothing, so their output and every
// gradient through them are zero and their log-sum-exp is +inf; the other sample is untouched.
TEST(OpsOracle, AttentionQueryWithNoKeys) {
  const std::int64_t B = 2, T = 70, C = 32;
  const int H = 2;
  Tensor qkv = randn({B, T, 3 * C}, 23), dy = randn({B, T, C}, 24);
  Tensor mask = Tensor::empty({B, T}, DType::i32);
  for (std::int64_t t = 0; t < B * T; ++t) mask.data<std::int32_t>()[t] = t < T ? 1 : 0;
  const ops::AttentionOptions opt{.n_head = H, .causal = false, .key_mask = &mask};
  Tensor y = Tensor::empty({B, T, C}), lse = Tensor::empty({B, H, T}), dqkv = Tensor::empty(qkv.shape());
  ops::attention_forward(y, lse, qkv, opt);
  ops::attention_backward(dqkv, dy, qkv, y, lse, opt);
  for (std::int64_t i = T * C; i < B * T * C; ++i) ASSERT_EQ(y.data<float>()[i], 0.0f) << i;
  for (std::int64_t i = H * T; i < B * H * T; ++i) ASSERT_EQ(lse.data<float>()[i], std::numeric_limits<float>::infinity()) << i;
  for (std::int64_t i = T * 3 * C; i < B * T * 3 * C; ++i) ASSERT_EQ(dqkv.data<float>()[i], 0.0f) << i;
  auto ref = run_oracle("attention", {{"qkv", qkv.slice(0, 0, 1)}, {"dy", dy.slice(0, 0, 1)}},
                        {{"n_head", std::to_string(H)}, {"causal", "0"}});
  EXPECT_TRUE(all_close(y.slice(0, 0, 1), ref.at("y"), kFp32));
  EXPECT_TRUE(all_close(dqkv.slice(0, 0, 1), ref.at("dqkv"), kFp32));
}

TEST(OpsOracle, TokenAndPositionEmbedding) {
  const std::int64_t B = 3, T = 37, V = 101, Tmax = 41, C = 72;
  Tensor ids = randint({B, T}, 19, 0, std::int32_t(V)), wte = randn({V, C}, 20), wpe = randn({Tmax, C}, 21),
         dy = randn({B, T, C}, 22);
  Tensor y = Tensor::empty({B, T, C});
  ops::embedding_forward(y, ids, wte);
  ops::position_embedding_forward(y, wpe);
  Tensor dwte = Tensor::zeros({V, C}), dwpe = Tensor::zeros({Tmax, C});
  ops::embedding_backward(dwte, dy, ids);
  ops::position_embedding_backward(dwpe, dy);
  auto ref = run_oracle("embedding", {{"tokens", ids}, {"wte", wte}, {"wpe", wpe}, {"dy", dy}});
  EXPECT_TRUE(all_close(y, ref.at("y"), kFp32));
  EXPECT_TRUE(all_close(dwte, ref.at("dwte"), kFp32));
  EXPECT_TRUE(all_close(dwpe, ref.at("dwpe"), kFp32));
}

TEST(OpsOracle, EmbeddingRejectsIdsOutsideTheVocabulary) {
  Tensor ids = Tensor::full({1}, 0.0f);
  Tensor bad = Tensor::empty({1, 1}, DType::i32);
  bad.data<std::int32_t>()[0] = 7;
  Tensor table = Tensor::zeros({5, 4}), y = Tensor::empty({1, 1, 4});
  EXPECT_THROW(ops::embedding_forward(y, bad, table), Error);
}

TEST(OpsOracle, FusedSoftmaxCrossEntropyWithIgnoreIndex) {
  const std::int64_t N = 37, V = 101;
  Tensor logits = randn({N, V}, 23, 3.0f), targets = randint({N}, 24, 0, std::int32_t(V));
  for (std::int64_t i = 0; i < N; i += 5) targets.data<std::int32_t>()[i] = ops::kIgnoreIndex;
  Tensor losses = Tensor::empty({N}), lse = Tensor::empty({N}), dlogits = Tensor::empty({N, V});
  ops::cross_entropy_forward(losses, lse, logits, targets);
  std::int64_t valid = 0;
  double sum = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    valid += targets.data<std::int32_t>()[i] != ops::kIgnoreIndex;
    sum += losses.data<float>()[i];
  }
  ops::cross_entropy_backward(dlogits, logits, lse, targets, 1.0f / float(valid));
  auto ref = run_oracle("cross_entropy", {{"logits", logits}, {"targets", targets}});
  EXPECT_TRUE(all_close(Tensor::full({1}, float(sum / double(valid))), ref.at("loss"), kFp32));
  EXPECT_TRUE(all_close(dlogits, ref.at("dlogits"), kFp32));
}

TEST(OpsOracle, CastsMatchTorchBitForBit) {
  Tensor x = randn({1001}, 25, 100.0f);
  // Include values at the edges of fp16's range.
  x.data<float>()[0] = 65504.0f, x.data<float>()[1] = 70000.0f, x.data<float>()[2] = 1e-7f, x.data<float>()[3] = -3e-8f;
  Tensor b16 = Tensor::empty(x.shape(), DType::bf16), h16 = Tensor::empty(x.shape(), DType::f16);
  ops::cast(b16, x);
  ops::cast(h16, x);
  Tensor b_back = Tensor::empty(x.shape()), h_back = Tensor::empty(x.shape());
  ops::cast(b_back, b16);
  ops::cast(h_back, h16);
  auto ref = run_oracle("cast", {{"x", x}});
  EXPECT_TRUE(all_close(b_back, ref.at("bf16_back"), {0, 0}));
  EXPECT_TRUE(all_close(h_back, ref.at("f16_back"), {0, 0}));
  EXPECT_EQ(std::memcmp(b16.raw(), ref.at("bf16").raw(), b16.nbytes()), 0);
  EXPECT_EQ(std::memcmp(h16.raw(), ref.at("f16").raw(), h16.nbytes()), 0);
}

// NF4 with double quantization (ops/nf4.h) against reference.py's own implementation of QLoRA's
// algorithm (the paper's NF4 table, bitsandbytes' dynamic code and layouts): every code byte,
// every absmax code and scale, the offset, bitwise; an odd size ends in a partial block and a half
// byte. Dequantized, each element is within half the widest NF4 gap of its block's absmax.
TEST(OpsOracle, Nf4Quantization) {
  const Tensor x = randn({301, 67}, 41, 0.02f);
  const ops::Nf4Weight q = ops::nf4_quantize(x);
  auto ref = run_oracle("nf4", {{"x", x}});
  ASSERT_EQ(q.codes.nbytes(), ref.at("codes").nbytes());
  EXPECT_EQ(std::memcmp(q.codes.raw(), ref.at("codes").raw(), q.codes.nbytes()), 0) << "NF4 codes";
  ASSERT_EQ(q.absmax_codes.nbytes(), ref.at("absmax_codes").nbytes());
  EXPECT_EQ(std::memcmp(q.absmax_codes.raw(), ref.at("absmax_codes").raw(), q.absmax_codes.nbytes()), 0)
      << "absmax codes";
  EXPECT_TRUE(all_close(q.absmax_scales, ref.at("absmax_scales"), {0, 0})) << "absmax scales";
  EXPECT_EQ(q.absmax_offset, ref.at("offset").data<float>()[0]);
  Tensor back = Tensor::empty(x.shape());
  ops::nf4_dequantize(back, q);
  const Tensor absmax = ops::nf4_absmax(q);
  for (std::int64_t i = 0; i < x.numel(); ++i)  // the widest gap: -1 to -0.696 (0.304), and the absmax's own error
    ASSERT_LE(std::fabs(back.data<float>()[i] - x.data<float>()[i]), 0.16f * absmax.data<float>()[i / ops::kNf4Block] + 1e-4f)
        << "element " << i;
}

TEST(OpsOracle, AdamWFiveSteps) {
  const std::int64_t N = 1001, S = 5;
  Tensor p = randn({N}, 26), grads = randn({S, N}, 27), m = Tensor::zeros({N}), v = Tensor::zeros({N});
  Tensor p0 = p.clone();
  const ops::AdamWOptions opt{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  for (std::int64_t s = 0; s < S; ++s) ops::adamw_step(p, grads.slice(0, s, s + 1).reshape({N}), m, v, opt, s + 1);
  auto ref = run_oracle("adamw", {{"p0", p0}, {"grads", grads}},
                        {{"lr", "1e-2"}, {"beta1", "0.9"}, {"beta2", "0.95"}, {"eps", "1e-8"}, {"weight_decay", "0.1"}});
  EXPECT_TRUE(all_close(p, ref.at("p"), kFp32));
  EXPECT_TRUE(all_close(m, ref.at("m"), kFp32));
  EXPECT_TRUE(all_close(v, ref.at("v"), kFp32));
}

TEST(OpsOracle, SgdMomentumFiveSteps) {
  const std::int64_t N = 1001, S = 5;
  Tensor p = randn({N}, 28), grads = randn({S, N}, 29), buf = Tensor::zeros({N});
  Tensor p0 = p.clone();
  const ops::SgdOptions opt{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f};
  for (std::int64_t s = 0; s < S; ++s) ops::sgd_step(p, grads.slice(0, s, s + 1).reshape({N}), buf, opt, s == 0);
  auto ref = run_oracle("sgd", {{"p0", p0}, {"grads", grads}}, {{"lr", "0.05"}, {"momentum", "0.9"}, {"weight_decay", "0.01"}});
  EXPECT_TRUE(all_close(p, ref.at("p"), kFp32));
  EXPECT_TRUE(all_close(buf, ref.at("buf"), kFp32));
}

TEST(OpsOracle, GlobalGradNormAndClipping) {
  std::vector<Tensor> g{randn({37, 72}, 30), randn({101}, 31), randn({3, 5, 7}, 32)};
  std::vector<Tensor> orig{g[0].clone(), g[1].clone(), g[2].clone()};
  const double norm = ops::clip_grad_norm(g, 5.0);
  auto ref = run_oracle("grad_norm", {{"g0", orig[0]}, {"g1", orig[1]}, {"g2", orig[2]}}, {{"max_norm", "5.0"}});
  EXPECT_TRUE(all_close(Tensor::full({1}, float(norm)), ref.at("norm"), kFp32));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(g[std::size_t(i)], ref.at("g" + std::to_string(i)), kFp32));
}

}  // namespace
}  // namespace tidal
