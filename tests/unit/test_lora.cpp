// LoRA's mechanism without the PEFT oracle (tests/oracle/test_lora_oracle.cpp has that): an
// adapter's output is x W^T + s x A^T B^T on its block of rows, computed here by plain GEMMs; a
// frozen base keeps no gradient and comes out of backward unchanged; an NF4 base's products are
// those of its dequantized weight, whole or a tile at a time; folding the adapters into the base (merge_lora) gives the
// adapted model's logits; a target that names no linear is an error listing the family's linears.
#include "config/config.h"
#include "engine/finetune.h"
#include "models/lora.h"
#include "nn/linear.h"
#include "nn/runner.h"
#include "ops/gemm.h"
#include "ops/grad_norm.h"
#include "ops/nf4.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;

// `params` filled with noise (B included, so the adapters' terms are not zero).
void randomize(const std::vector<nn::Parameter*>& params) {
  std::uint64_t key = 40;
  for (nn::Parameter* p : params) p->data.copy_from(testing::randn(p->shape, ++key, 0.1f));
}

// A Linear [12, 8] with an adapter on rows [4, 10) (a block of a fused linear), against
// y = x W^T + b, then y[:, 4:10] += s (x A^T) B^T.
TEST(Lora, AdapterAddsItsTermToItsBlockOfRows) {
  nn::Linear linear(8, 12, true, nn::ParameterInit::normal(0.1f));
  linear.assign_names("lin");
  nn::Parameter& w = linear.weight();
  w.frozen = true;
  linear.attach_adapter(std::make_unique<nn::LowRankAdapter>(
      w, std::vector<nn::LoraTarget>{{.name = "k_proj", .first_row = 4, .rows = 6}},
      nn::LoraOptions{.rank = 3, .alpha = 6.0f}));
  for (nn::Parameter* p : linear.parameters()) nn::materialize(*p, 1, host_allocator());
  randomize(linear.parameters());
  auto* adapter = dynamic_cast<nn::LowRankAdapter*>(linear.adapter());
  ASSERT_NE(adapter, nullptr);
  EXPECT_EQ(adapter->a(0).name, "lin.lora.k_proj.A");
  EXPECT_FALSE(w.grad.defined());

  const Tensor x = testing::randn({5, 8}, 1);
  nn::Runner runner;
  nn::StepState state{.runner = &runner};
  nn::Context ctx(state);
  const Tensor y = runner.forward(linear, x, ctx);

  Tensor expected = Tensor::empty({5, 12});
  nn::linear_forward(expected, x, w, linear.parameters()[1], false);
  Tensor h = Tensor::empty({5, 3}), term = Tensor::empty({5, 6});
  ops::gemm(h, x, adapter->a(0).data, {.trans_b = true});
  ops::gemm(term, h, adapter->b(0).data, {.trans_b = true, .alpha = 2.0f});
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 6; ++j) expected.data<float>()[i * 12 + 4 + j] += term.data<float>()[i * 6 + j];
  EXPECT_TRUE(all_close(y, expected, kFp32));

  // Backward: the base frozen (no gradient, unchanged), A and B get theirs.
  const Tensor before = w.data.clone();
  const Tensor dx = runner.backward(linear, testing::randn({5, 12}, 2), ctx);
  EXPECT_EQ(dx.shape(), x.shape());
  EXPECT_FALSE(w.grad.defined());
  EXPECT_EQ(std::memcmp(w.data.raw(), before.raw(), before.nbytes()), 0);
  EXPECT_GT(ops::sum_of_squares(adapter->a(0).grad), 0.0);
  EXPECT_GT(ops::sum_of_squares(adapter->b(0).grad), 0.0);
}

// QLoRA's linear [out, in] (a bias of noise): a weight held in NF4 (Parameter::nf4, data undefined)
// gives the products of its dequantized values, forward (y = x W^T + b) and backward (dx = dy W),
// over `tokens` rows, within `tolerance`.
void expect_nf4_linear_products(std::int64_t in, std::int64_t out, std::int64_t tokens, testing::Tolerance tolerance) {
  nn::Linear linear(in, out, true, nn::ParameterInit::normal(0.05f));
  linear.assign_names("lin");
  nn::Parameter& w = linear.weight();
  for (nn::Parameter* p : linear.parameters()) nn::materialize(*p, 2, host_allocator());
  Tensor bias = linear.parameters()[1]->data;  // shares its storage
  bias.copy_from(testing::randn({out}, 9, 0.1f));
  w.frozen = true;
  w.grad = Tensor();
  w.nf4 = std::make_shared<const ops::Nf4Weight>(ops::nf4_quantize(w.data));
  Tensor dequantized = Tensor::empty(w.shape);
  ops::nf4_dequantize(dequantized, *w.nf4);
  w.data = Tensor();

  const Tensor x = testing::randn({tokens, in}, 3), dy = testing::randn({tokens, out}, 4);
  nn::Runner runner;
  nn::StepState state{.runner = &runner};
  nn::Context ctx(state);
  const Tensor y = runner.forward(linear, x, ctx);
  const Tensor dx = runner.backward(linear, dy, ctx);
  Tensor expected_y = Tensor::empty({tokens, out}), expected_dx = Tensor::empty({tokens, in});
  ops::gemm(expected_y, x, dequantized, {.trans_b = true, .bias = &bias});
  ops::gemm(expected_dx, dy, dequantized);
  EXPECT_TRUE(all_close(y, expected_y, tolerance));
  EXPECT_TRUE(all_close(dx, expected_dx, tolerance));
}

// The weight dequantized whole for each product: bitwise.
TEST(Lora, Nf4LinearIsDequantizeThenMatmul) { expect_nf4_linear_products(128, 96, 7, {0, 0}); }

// [2100, 2048]: past the 4 Mi elements of a tile, so forward takes 2 tiles of rows (2048 + 52) and
// backward 2 of columns (1997 + 51); each output element is still one product (within fp32's
// rounding: the BLAS may block a narrower product's sums differently).
TEST(Lora, TiledNf4LinearIsDequantizeThenMatmul) { expect_nf4_linear_products(2048, 2100, 5, kFp32); }

TEST(Lora, Nf4BlockIsItsPartOfTheWhole) {
  // Blocks that start and end inside NF4's blocks of 64 and cross rows: the whole's elements.
  const Tensor x = testing::randn({37, 131}, 6, 0.05f);
  const ops::Nf4Weight q = ops::nf4_quantize(x);
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor whole = Tensor::empty(x.shape(), dtype);
    ops::nf4_dequantize(whole, q);
    for (const auto& [r, c, rows, cols] : {std::array<std::int64_t, 4>{0, 0, 37, 60}, {5, 3, 11, 67},
                                           {36, 130, 1, 1}, {2, 0, 35, 131}}) {
      Tensor block = Tensor::empty({rows, cols}, dtype);
      ops::nf4_dequantize(block, q, {.first_row = r, .first_col = c});
      const Tensor expected = whole.slice(0, r, r + rows).slice(1, c, c + cols).clone();
      EXPECT_EQ(std::memcmp(block.raw(), expected.raw(), expected.nbytes()), 0) << r << " " << c << " " << dtype_name(dtype);
    }
  }
}

config::Config llama_lora(const std::string& targets) {
  return config::load_config("", {"model.type=llama", "model.n_layer=2", "model.n_embd=32", "model.n_head=4",
                                  "model.n_kv_head=2", "model.intermediate_size=48", "model.vocab_size=50",
                                  "model.seq_len=9", "finetune.method=lora", "finetune.lora_targets=" + targets});
}

TEST(Lora, MergedBaseGivesTheAdaptedLogits) {
  const config::Config cfg = llama_lora("q_proj,v_proj,o_proj,up_proj,down_proj");
  auto model = engine::build_model(cfg, nn::single_device_layers());
  model->materialize(3);
  std::vector<nn::Parameter*> adapters;
  for (nn::Parameter* p : model->parameters())
    if (!p->frozen) adapters.push_back(p);
  EXPECT_EQ(adapters.size(), 2u * 5 * 2);  // A and B of 5 targets in 2 layers
  // rank 8 x (B rows: q 32, v 16, o 32, up 48, down 32; A columns: 32 each, down 48) x 2 layers
  EXPECT_EQ(model->num_parameters(true), 2 * 8 * ((32 + 16 + 32 + 48 + 32) + (4 * 32 + 48)));
  randomize(adapters);
  const nn::Batch batch{.tokens = testing::randint({2, 9}, 5, 0, 50), .targets = testing::randint({2, 9}, 6, 0, 50)};
  nn::Runner runner;
  nn::StepState state{.runner = &runner, .training = false, .batch = &batch};
  nn::Context ctx(state);
  const Tensor adapted = model->run_forward(ctx).logits.clone();
  models::merge_lora(*model);
  for (nn::Parameter* p : adapters) p->data.zero_();  // only the folded-in weights speak now
  nn::Context again(state);
  EXPECT_TRUE(all_close(model->run_forward(again).logits, adapted, {1e-5, 1e-5}));
}

TEST(Lora, UnknownTargetListsTheLinears) {
  try {
    auto model = engine::build_model(llama_lora("q_proj,c_attn"), nn::single_device_layers());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"c_attn\" is none of a llama model's linears"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tidal
