// The Llama family's CPU ops against PyTorch on the same inputs (odd shapes), forward and
// backward: RMSNorm as transformers' LlamaRMSNorm, rotary embeddings as LlamaRotaryEmbedding and
// apply_rotary_pos_emb (with Llama 3's frequency scaling re-stated from transformers 4.43), and
// SwiGLU as Llama's MLP (silu(gate) * up).
#include "ops/rms_norm.h"
#include "ops/rotary.h"
#include "ops/swiglu.h"
#include "support/oracle.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;
using testing::randn;
using testing::run_oracle;

TEST(LlamaOpsOracle, RmsNormForwardBackward) {
  for (const Shape& shape : {Shape{37, 96}, Shape{3, 13, 101}}) {
    SCOPED_TRACE(shape.str());
    const std::int64_t C = shape.dim(-1), N = shape.numel() / C;
    Tensor x = randn(shape, 1, 2.0f), w = randn({C}, 2), dy = randn(shape, 3), dw0 = randn({C}, 4);
    Tensor y = Tensor::empty(shape), rstd = Tensor::empty({N}), dx = Tensor::empty(shape), dw = dw0.clone();
    ops::rms_norm_forward(y, rstd, x, w, 1e-6f);
    ops::rms_norm_backward(dx, dw, dy, x, w, rstd);
    auto ref = run_oracle("rms_norm", {{"x", x}, {"w", w}, {"dy", dy}}, {{"eps", "1e-6"}});
    EXPECT_TRUE(all_close(y, ref.at("y"), kFp32));
    EXPECT_TRUE(all_close(rstd, ref.at("rstd"), kFp32));
    EXPECT_TRUE(all_close(dx, ref.at("dx"), kFp32));
    // dw accumulates onto what it held.
    Tensor dw_ref = ref.at("dw").clone();
    for (std::int64_t c = 0; c < C; ++c) dw_ref.data<float>()[c] += dw0.data<float>()[c];
    EXPECT_TRUE(all_close(dw, dw_ref, kFp32));
  }
}

struct RotaryCase {
  const char* name;
  std::int64_t head_dim;
  double theta;
  ops::RopeScaling scaling;
};

// hd 16 and 24 (24/2 is not a power of two); Llama 2's theta; Llama 3.1's theta and scaling, and
// a short original context whose bands all fall inside hd 24's wavelengths.
const RotaryCase kRotaryCases[] = {
    {"hd16_theta1e4", 16, 10000.0, {}},
    {"hd24_theta1e4", 24, 10000.0, {}},
    {"hd16_llama31", 16, 500000.0, {.factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                                    .original_max_positions = 8192}},
    {"hd24_short_context", 24, 10000.0, {.factor = 4.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                                         .original_max_positions = 64}},
};

TEST(LlamaOpsOracle, RotaryTablesAndApply) {
  // B 2, T 37 from position 5, 6 query heads sharing 2 key/value heads.
  const std::int64_t B = 2, T = 37, first = 5;
  const int H = 6, KV = 2;
  for (const RotaryCase& rc : kRotaryCases) {
    SCOPED_TRACE(rc.name);
    const std::int64_t hd = rc.head_dim, W = (H + 2 * KV) * hd;
    const std::vector<float> inv_freq = ops::rotary_inverse_frequencies(hd, rc.theta, rc.scaling);
    Tensor cos = Tensor::empty({T, hd / 2}), sin = Tensor::empty({T, hd / 2});
    ops::rotary_tables(cos, sin, inv_freq, first);
    Tensor qkv = randn({B, T, W}, 5), dy = randn({B, T, W}, 6);
    Tensor y = qkv.clone(), dqkv = dy.clone();
    ops::rotary_apply(y, cos, sin, {.n_head = H, .n_kv_head = KV});
    ops::rotary_apply(dqkv, cos, sin, {.n_head = H, .n_kv_head = KV, .inverse = true});

    io::Metadata meta{{"n_head", std::to_string(H)},
                      {"n_kv_head", std::to_string(KV)},
                      {"theta", fmt::format("{}", rc.theta)},
                      {"first", std::to_string(first)}};
    if (rc.scaling.factor > 0.0f) {
      meta["factor"] = fmt::format("{}", rc.scaling.factor);
      meta["low_freq_factor"] = fmt::format("{}", rc.scaling.low_freq_factor);
      meta["high_freq_factor"] = fmt::format("{}", rc.scaling.high_freq_factor);
      meta["original_max_positions"] = std::to_string(rc.scaling.original_max_positions);
    }
    auto ref = run_oracle("rotary", {{"qkv", qkv}, {"dy", dy}}, meta);
    Tensor inv = Tensor::empty({hd / 2});
    std::memcpy(inv.data<float>(), inv_freq.data(), inv.nbytes());
    EXPECT_TRUE(all_close(inv, ref.at("inv_freq"), kFp32));
    EXPECT_TRUE(all_close(cos, ref.at("cos"), kFp32));
    EXPECT_TRUE(all_close(sin, ref.at("sin"), kFp32));
    EXPECT_TRUE(all_close(y, ref.at("y"), kFp32));
    EXPECT_TRUE(all_close(dqkv, ref.at("dqkv"), kFp32));
  }
}

TEST(LlamaOpsOracle, SwiGluForwardBackward) {
  const std::int64_t N = 37, I = 96;
  Tensor gate_up = randn({N, 2 * I}, 7, 3.0f), dy = randn({N, I}, 8);
  // Gates far into both tails: sigmoid's exponential must neither overflow nor lose the sign.
  const float tails[] = {-100.0f, -30.0f, 30.0f, 100.0f};
  for (int k = 0; k < 4; ++k) gate_up.data<float>()[k] = tails[k];
  Tensor y = Tensor::empty({N, I}), dgate_up = Tensor::empty({N, 2 * I});
  ops::swiglu_forward(y, gate_up);
  ops::swiglu_backward(dgate_up, dy, gate_up);
  auto ref = run_oracle("swiglu", {{"gate_up", gate_up}, {"dy", dy}});
  EXPECT_TRUE(all_close(y, ref.at("y"), kFp32));
  EXPECT_TRUE(all_close(dgate_up, ref.at("dgate_up"), kFp32));
}

}  // namespace
}  // namespace tidal
