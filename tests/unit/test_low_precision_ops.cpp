// bf16 / fp16 storage: each op widens to fp32 inside, so its result equals the fp32 op on the
// same rounded inputs up to one rounding of the output (2^-8 relative for bf16, 2^-11 for fp16).
// Also the residual family's closed-form results.
#include "ops/bias.h"
#include "ops/cast.h"
#include "ops/class_token.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/optimizer_step.h"
#include "ops/residual.h"
#include "ops/rms_norm.h"
#include "ops/rotary.h"
#include "ops/swiglu.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tidal {
namespace {

using testing::all_close;

Tensor cast_to(const Tensor& t, DType dt) {
  Tensor out = Tensor::empty(t.shape(), dt);
  ops::cast(out, t);
  return out;
}

testing::Tolerance output_rounding(DType dt) {
  // Half an ulp of the output, relative, plus a floor for values near zero.
  return dt == DType::bf16 ? testing::Tolerance{1e-3, 1.0 / 256} : testing::Tolerance{1e-4, 1.0 / 2048};
}

class LowPrecision : public ::testing::TestWithParam<DType> {};

TEST_P(LowPrecision, LayerNormMatchesFp32OnRoundedInputs) {
  const DType dt = GetParam();
  const std::int64_t N = 37, C = 72;
  Tensor x = cast_to(testing::randn({N, C}, 1), dt), w = cast_to(testing::randn({C}, 2), dt),
         b = cast_to(testing::randn({C}, 3), dt), dy = cast_to(testing::randn({N, C}, 4), dt);
  Tensor y = Tensor::empty({N, C}, dt), mean = Tensor::empty({N}), rstd = Tensor::empty({N});
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  Tensor dx = Tensor::empty({N, C}, dt), dw = Tensor::zeros({C}, dt), db = Tensor::zeros({C}, dt);
  ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);

  Tensor x32 = cast_to(x, DType::f32), w32 = cast_to(w, DType::f32), b32 = cast_to(b, DType::f32),
         dy32 = cast_to(dy, DType::f32);
  Tensor y32 = Tensor::empty({N, C}), dx32 = Tensor::empty({N, C}), dw32 = Tensor::zeros({C}), db32 = Tensor::zeros({C});
  ops::layernorm_forward(y32, mean, rstd, x32, w32, b32, 1e-5f);
  ops::layernorm_backward(dx32, dw32, db32, dy32, x32, w32, mean, rstd);
  EXPECT_TRUE(all_close(y, y32, output_rounding(dt)));
  EXPECT_TRUE(all_close(dx, dx32, output_rounding(dt)));
  EXPECT_TRUE(all_close(dw, dw32, output_rounding(dt)));
  EXPECT_TRUE(all_close(db, db32, output_rounding(dt)));
}

TEST_P(LowPrecision, GeluMatchesFp32OnRoundedInputs) {
  const DType dt = GetParam();
  Tensor x = cast_to(testing::randn({1001}, 5, 3.0f), dt), dy = cast_to(testing::randn({1001}, 6), dt);
  Tensor y = Tensor::empty(x.shape(), dt), dx = Tensor::empty(x.shape(), dt);
  ops::gelu_forward(y, x);
  ops::gelu_backward(dx, dy, x);
  Tensor x32 = cast_to(x, DType::f32), y32 = Tensor::empty(x.shape()), dx32 = Tensor::empty(x.shape());
  ops::gelu_forward(y32, x32);
  ops::gelu_backward(dx32, cast_to(dy, DType::f32), x32);
  EXPECT_TRUE(all_close(y, y32, output_rounding(dt)));
  EXPECT_TRUE(all_close(dx, dx32, output_rounding(dt)));
}

TEST_P(LowPrecision, CrossEntropyAndEmbeddingMatchFp32OnRoundedInputs) {
  const DType dt = GetParam();
  const std::int64_t N = 37, V = 101;
  Tensor logits = cast_to(testing::randn({N, V}, 7, 2.0f), dt), targets = testing::randint({N}, 8, 0, std::int32_t(V));
  Tensor losses = Tensor::empty({N}), lse = Tensor::empty({N}), d = Tensor::empty({N, V}, dt);
  ops::cross_entropy_forward(losses, lse, logits, targets);
  ops::cross_entropy_backward(d, logits, lse, targets, 1.0f / float(N));
  Tensor l32 = cast_to(logits, DType::f32), losses32 = Tensor::empty({N}), lse32 = Tensor::empty({N}),
         d32 = Tensor::empty({N, V});
  ops::cross_entropy_forward(losses32, lse32, l32, targets);
  ops::cross_entropy_backward(d32, l32, lse32, targets, 1.0f / float(N));
  EXPECT_TRUE(all_close(losses, losses32, testing::kFp32));  // computed in fp32 from the same inputs
  EXPECT_TRUE(all_close(d, d32, output_rounding(dt)));

  Tensor table = cast_to(testing::randn({V, 24}, 9), dt), ids = testing::randint({3, 5}, 10, 0, std::int32_t(V));
  Tensor y = Tensor::empty({3, 5, 24}, dt), y32 = Tensor::empty({3, 5, 24});
  ops::embedding_forward(y, ids, table);
  ops::embedding_forward(y32, ids, cast_to(table, DType::f32));
  EXPECT_TRUE(all_close(y, y32, {0, 0}));  // a lookup copies exactly
}

TEST_P(LowPrecision, RmsNormMatchesFp32OnRoundedInputs) {
  const DType dt = GetParam();
  const std::int64_t N = 37, C = 96;
  Tensor x = cast_to(testing::randn({N, C}, 11, 2.0f), dt), dy = cast_to(testing::randn({N, C}, 12), dt);
  Tensor w = testing::randn({C}, 13);  // the weight and its gradient stay fp32
  Tensor y = Tensor::empty({N, C}, dt), dx = Tensor::empty({N, C}, dt);
  Tensor rstd = Tensor::empty({N}), dw = Tensor::zeros({C});
  ops::rms_norm_forward(y, rstd, x, w, 1e-6f);
  ops::rms_norm_backward(dx, dw, dy, x, w, rstd);

  Tensor x32 = cast_to(x, DType::f32), y32 = Tensor::empty({N, C}), rstd32 = Tensor::empty({N}),
         dx32 = Tensor::empty({N, C}), dw32 = Tensor::zeros({C});
  ops::rms_norm_forward(y32, rstd32, x32, w, 1e-6f);
  ops::rms_norm_backward(dx32, dw32, cast_to(dy, DType::f32), x32, w, rstd32);
  EXPECT_TRUE(all_close(y, y32, output_rounding(dt)));
  EXPECT_TRUE(all_close(rstd, rstd32, testing::kFp32));  // fp32 from the same inputs
  EXPECT_TRUE(all_close(dx, dx32, output_rounding(dt)));
  EXPECT_TRUE(all_close(dw, dw32, testing::kFp32));
}

TEST_P(LowPrecision, RotaryMatchesFp32OnRoundedInputs) {
  const DType dt = GetParam();
  const std::int64_t B = 2, T = 37, hd = 24;
  const int H = 6, KV = 2;
  const std::vector<float> inv_freq = ops::rotary_inverse_frequencies(hd, 10000.0);
  Tensor cos = Tensor::empty({T, hd / 2}), sin = Tensor::empty({T, hd / 2});
  ops::rotary_tables(cos, sin, inv_freq, 5);
  Tensor qkv = cast_to(testing::randn({B, T, (H + 2 * KV) * hd}, 14), dt);
  Tensor qkv32 = cast_to(qkv, DType::f32);
  for (bool inverse : {false, true}) {
    const ops::RotaryOptions opt{.n_head = H, .n_kv_head = KV, .inverse = inverse};
    ops::rotary_apply(qkv, cos, sin, opt);
    ops::rotary_apply(qkv32, cos, sin, opt);
    EXPECT_TRUE(all_close(qkv, qkv32, output_rounding(dt))) << "inverse " << inverse;
    qkv32 = cast_to(qkv, DType::f32);  // the next step starts from the same rounded values
  }
}

TEST_P(LowPrecision, SwiGluMatchesFp32OnRoundedInputs) {
  const DType dt = GetParam();
  const std::int64_t N = 37, I = 96;
  Tensor gate_up = cast_to(testing::randn({N, 2 * I}, 15, 3.0f), dt), dy = cast_to(testing::randn({N, I}, 16), dt);
  Tensor y = Tensor::empty({N, I}, dt), d = Tensor::empty({N, 2 * I}, dt);
  ops::swiglu_forward(y, gate_up);
  ops::swiglu_backward(d, dy, gate_up);
  Tensor gu32 = cast_to(gate_up, DType::f32), y32 = Tensor::empty({N, I}), d32 = Tensor::empty({N, 2 * I});
  ops::swiglu_forward(y32, gu32);
  ops::swiglu_backward(d32, cast_to(dy, DType::f32), gu32);
  EXPECT_TRUE(all_close(y, y32, output_rounding(dt)));
  EXPECT_TRUE(all_close(d, d32, output_rounding(dt)));
}

INSTANTIATE_TEST_SUITE_P(Storage, LowPrecision, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_P(LowPrecision, AdamWWritesTheCopyAsACastAfterItWould) {
  // A chunk's step: the gradient in the param slot's storage, the update's copy written over it in
  // the same pass; bitwise the update then ops::cast. Odd length: the vector loop's tail too.
  const DType dt = GetParam();
  const std::int64_t n = 1037;
  const ops::AdamWOptions opt{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .weight_decay = 0.1f, .grad_scale = 4.0f};
  for (const bool shared : {true, false}) {
    SCOPED_TRACE(shared ? "the copy over the gradient" : "the copy apart");
    Tensor p = testing::randn({n}, 1), m = testing::randn({n}, 2, 0.1f), v = testing::rand_uniform({n}, 3, 0.0f, 0.01f);
    Tensor p_ref = p.clone(), m_ref = m.clone(), v_ref = v.clone();
    const Tensor g = cast_to(testing::randn({n}, 4), dt);
    Tensor slot = g.clone(), copy = shared ? slot : Tensor::empty({n}, dt);
    ops::adamw_step(p, slot, m, v, opt, 3, &copy);
    ops::adamw_step(p_ref, g, m_ref, v_ref, opt, 3);
    const Tensor want = cast_to(p_ref, dt);
    for (const auto& [got, ref] : {std::pair{p, p_ref}, {m, m_ref}, {v, v_ref}, {copy, want}})
      EXPECT_EQ(std::memcmp(got.raw(), ref.raw(), got.nbytes()), 0);
  }
}

TEST_P(LowPrecision, AdamWStepsAreEachTensorsOwnStep) {
  // A chunk's parameters in one multi-tensor step (ops::adamw_steps): bitwise adamw_step on each,
  // the copies over the gradients, the empty tensor included.
  const DType dt = GetParam();
  const ops::AdamWOptions opt{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .weight_decay = 0.1f, .grad_scale = 4.0f};
  std::vector<ops::AdamWTensors> list, each;
  for (const std::int64_t n : {37, 0, 1037, 5}) {
    const Tensor p = testing::randn({n}, 1 + std::uint64_t(n)), m = testing::randn({n}, 2, 0.1f);
    const Tensor v = testing::rand_uniform({n}, 3, 0.0f, 0.01f), g = cast_to(testing::randn({n}, 4), dt);
    for (auto* l : {&list, &each}) {
      Tensor slot = g.clone();
      l->push_back({.param = p.clone(), .grad = slot, .m = m.clone(), .v = v.clone(), .low = slot});
    }
  }
  ops::adamw_steps(list, opt, 3);
  for (ops::AdamWTensors& t : each) ops::adamw_step(t.param, t.grad, t.m, t.v, opt, 3, &t.low);
  for (std::size_t i = 0; i < list.size(); ++i)
    for (const auto& [got, ref] : {std::pair{list[i].param, each[i].param}, {list[i].m, each[i].m},
                                   {list[i].v, each[i].v}, {list[i].low, each[i].low}})
      EXPECT_TRUE(got.nbytes() == 0 || std::memcmp(got.raw(), ref.raw(), got.nbytes()) == 0) << "tensor " << i;
}

TEST_P(LowPrecision, CastToItsOwnTypeCopiesEveryBit) {
  // A gradient into its chunk's slot: the bytes as they are, NaN payloads included.
  Tensor t = cast_to(testing::randn({1000}, 31), GetParam());
  std::memset(t.raw(), 0x7f, 16);  // bf16 0x7f7f is a finite maximum-range value; fp16's is a NaN
  Tensor copy = Tensor::empty(t.shape(), GetParam());
  ops::cast(copy, t);
  EXPECT_EQ(std::memcmp(copy.raw(), t.raw(), t.nbytes()), 0);
}

// On the host a parameter's gradient may be its fp32 sum while the values are bf16 or fp16
// (memory::sums_in_place): every op that adds into a parameter's gradient adds the same as the
// fp32 op on the widened values, into the same fp32 sum (the inputs widen exactly).
TEST_P(LowPrecision, GradientsAddIntoFp32SumsAsTheFp32OpsDo) {
  const DType dt = GetParam();
  const std::int64_t N = 37, C = 72, V = 11;
  const Tensor dy = cast_to(testing::randn({N, C}, 21), dt), x = cast_to(testing::randn({N, C}, 22), dt),
               dy32 = cast_to(dy, DType::f32), x32 = cast_to(x, DType::f32);
  const auto sum = [&](std::uint64_t seed) { return testing::randn({C}, seed); };  // a sum of earlier micro-batches
  const auto same = [](const Tensor& a, const Tensor& b) { return all_close(a, b, testing::kFp32); };

  Tensor db = sum(23), db32 = sum(23);
  ops::bias_grad(db, dy);
  ops::bias_grad(db32, dy32);
  EXPECT_TRUE(same(db, db32));

  Tensor w = cast_to(testing::randn({C}, 24), dt), b = cast_to(testing::randn({C}, 25), dt);
  Tensor y = Tensor::empty({N, C}, dt), mean = Tensor::empty({N}), rstd = Tensor::empty({N});
  ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
  Tensor dx = Tensor::empty({N, C}, dt), dx32 = Tensor::empty({N, C}), dw = sum(26), dw32 = sum(26),
         dbn = sum(27), dbn32 = sum(27);
  ops::layernorm_backward(dx, dw, dbn, dy, x, w, mean, rstd);
  ops::layernorm_backward(dx32, dw32, dbn32, dy32, x32, cast_to(w, DType::f32), mean, rstd);
  EXPECT_TRUE(same(dw, dw32));
  EXPECT_TRUE(same(dbn, dbn32));

  const Tensor ids = testing::randint({N}, 28, 0, std::int32_t(V));
  Tensor dtable = testing::randn({V, C}, 29), dtable32 = testing::randn({V, C}, 29);
  ops::embedding_backward(dtable, dy, ids);
  ops::embedding_backward(dtable32, dy32, ids);
  EXPECT_TRUE(same(dtable, dtable32));

  Tensor dpos = testing::randn({N + 3, C}, 30), dpos32 = testing::randn({N + 3, C}, 30);
  ops::position_embedding_backward(dpos, dy.reshape({1, N, C}), 2);
  ops::position_embedding_backward(dpos32, dy32.reshape({1, N, C}), 2);
  EXPECT_TRUE(same(dpos, dpos32));

  Tensor dtok = sum(31), dtok32 = sum(31), dxt = Tensor::empty({1, N - 1, C}, dt), dxt32 = Tensor::empty({1, N - 1, C});
  ops::prepend_token_backward(dxt, dtok, dy.reshape({1, N, C}));
  ops::prepend_token_backward(dxt32, dtok32, dy32.reshape({1, N, C}));
  EXPECT_TRUE(same(dtok, dtok32));

  Tensor dwm = testing::randn({C, C}, 32), dwm32 = testing::randn({C, C}, 32);
  ops::gemm(dwm, dy, x, {.trans_a = true, .beta = 1.0f});  // a linear's dW += dy^T x
  ops::gemm(dwm32, dy32, x32, {.trans_a = true, .beta = 1.0f});
  EXPECT_TRUE(same(dwm, dwm32));

  Tensor acc = sum(33), acc32 = sum(33);
  ops::accumulate(acc, dy.slice(0, 0, 1).reshape({C}));
  ops::accumulate(acc32, dy32.slice(0, 0, 1).reshape({C}));
  EXPECT_TRUE(all_close(acc, acc32, {0, 0}));  // one addition, rounded once either way
}

TEST(Residual, ClosedForm) {
  Tensor a = Tensor::empty({5}), b = Tensor::empty({5}), y = Tensor::empty({5});
  for (int i = 0; i < 5; ++i) a.data<float>()[i] = float(i), b.data<float>()[i] = 0.5f * float(i);
  ops::residual_add(y, a, b);
  ops::accumulate(y, a);  // y = 2a + b = 2.5 i
  ops::scale(y, 2.0f);    // 5 i
  for (int i = 0; i < 5; ++i) EXPECT_EQ(y.data<float>()[i], 5.0f * float(i));
}

}  // namespace
}  // namespace tidal
