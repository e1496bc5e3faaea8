// The module runner: hooks see every module's forward and backward in execution order (the
// order PatrickStar's access / release and ZeRO-3 rely on), and tied parameters are owned once;
// modules run at once on the threads hear their hooks around the whole run, and an error in one
// comes back to the caller.
#include "models/gpt/gpt.h"
#include "nn/linear.h"
#include "nn/runner.h"
#include "support/random.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace tidal {
namespace {

class RecordingHooks final : public nn::ModuleHooks {
 public:
  void before_forward(nn::Module& m) override { log.push_back("F+ " + m.path()); }
  void after_forward(nn::Module& m) override { log.push_back("F- " + m.path()); }
  void before_backward(nn::Module& m) override { log.push_back("B+ " + m.path()); }
  void after_backward(nn::Module& m) override { log.push_back("B- " + m.path()); }
  void after_input_gradient(nn::Module& m, std::span<nn::Parameter* const> deferred) override {
    log.push_back("I- " + m.path() + names(deferred));
  }
  void before_weight_gradient(nn::Module& m, std::span<nn::Parameter* const> deferred) override {
    log.push_back("W+ " + m.path() + names(deferred));
  }
  void after_weight_gradient(nn::Module& m, std::span<nn::Parameter* const> deferred) override {
    log.push_back("W- " + m.path() + names(deferred));
  }
  static std::string names(std::span<nn::Parameter* const> params) {
    std::string out;
    for (const nn::Parameter* p : params) out += " " + p->name;
    return out;
  }
  std::vector<std::string> log;
};

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

std::size_t index_of(const std::vector<std::string>& v, const std::string& s) {
  auto it = std::find(v.begin(), v.end(), s);
  EXPECT_NE(it, v.end()) << s;
  return std::size_t(it - v.begin());
}

TEST(ModuleRunner, HooksSeeEveryModuleInExecutionOrder) {
  auto model = models::make_gpt({.n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = 11, .seq_len = 5});
  model->materialize(1);
  nn::Batch batch{.tokens = testing::randint({2, 5}, 1, 0, 11), .targets = testing::randint({2, 5}, 2, 0, 11)};
  RecordingHooks hooks;
  nn::Runner runner;
  runner.add_hooks(&hooks);
  nn::StepState state{.runner = &runner, .batch = &batch};
  nn::Context ctx(state);
  model->run_forward(ctx);
  model->run_backward(ctx);
  const auto& log = hooks.log;
  // Nesting: a block's forward brackets its children's; forward of block 0 before block 1.
  EXPECT_LT(index_of(log, "F+ blocks.0"), index_of(log, "F+ blocks.0.attn.qkv"));
  EXPECT_LT(index_of(log, "F- blocks.0.mlp.proj"), index_of(log, "F- blocks.0"));
  EXPECT_LT(index_of(log, "F- blocks.0"), index_of(log, "F+ blocks.1"));
  // Backward runs in reverse: the tied head before block 1, block 1 before block 0, embedding last.
  EXPECT_LT(index_of(log, "B- lm_head"), index_of(log, "B+ blocks.1"));
  EXPECT_LT(index_of(log, "B- blocks.1"), index_of(log, "B+ blocks.0"));
  EXPECT_LT(index_of(log, "B- blocks.0"), index_of(log, "B+ wte"));
  std::size_t forwards = 0, backwards = 0;
  for (auto& e : log) forwards += e.starts_with("F+"), backwards += e.starts_with("B+");
  EXPECT_EQ(forwards, backwards);
}

// B and W (zero-bubble pipelines): under StepState::weight_gradients each linear leaves its weight
// gradient's product for the W pass, its hooks hear after_input_gradient (naming the weight)
// instead of after_backward, and the W pass runs inside before / after_weight_gradient; the head's
// product stays in B (its output gradient is vocabulary / width times its input). The gradients
// after W are the fused backward's, bit for bit.
TEST(ModuleRunner, WeightGradientPassRunsInsideItsHooks) {
  const models::GptConfig config{.n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = 101, .seq_len = 5};
  nn::Batch batch{.tokens = testing::randint({2, 5}, 1, 0, 101), .targets = testing::randint({2, 5}, 2, 0, 101)};
  std::map<std::string, std::vector<float>> fused;
  for (const bool split : {false, true}) {
    auto model = models::make_gpt(config);
    model->materialize(1);
    RecordingHooks hooks;
    nn::Runner runner;
    runner.add_hooks(&hooks);
    nn::WeightGradients later;
    nn::StepState state{.runner = &runner, .batch = &batch, .weight_gradients = split ? &later : nullptr};
    nn::Context ctx(state);
    model->run_forward(ctx);
    model->run_backward(ctx);
    if (!split) {
      for (nn::Parameter* p : model->parameters()) fused[p->name] = values(p->grad);
      continue;
    }
    const std::vector<std::string> input_gradients = hooks.log;
    EXPECT_TRUE(later.products.empty());
    ASSERT_EQ(later.passes.size(), 8u);  // 4 linears a block
    EXPECT_NE(std::find(input_gradients.begin(), input_gradients.end(), "I- blocks.1.mlp.fc blocks.1.mlp.fc.weight"),
              input_gradients.end());
    EXPECT_EQ(std::count(input_gradients.begin(), input_gradients.end(), "B- blocks.1.mlp.fc"), 0);
    EXPECT_EQ(std::count(input_gradients.begin(), input_gradients.end(), "B- lm_head"), 1);
    for (float g : values(model->parameter("blocks.0.attn.qkv.weight").grad)) ASSERT_EQ(g, 0.0f);  // not yet
    for (const auto& pass : later.passes) pass();
    const std::vector<std::string> w(hooks.log.begin() + std::ptrdiff_t(input_gradients.size()), hooks.log.end());
    ASSERT_EQ(w.size(), 16u);
    EXPECT_EQ(w[0], "W+ blocks.1.mlp.proj blocks.1.mlp.proj.weight");  // in the order of the backwards
    EXPECT_EQ(w[1], "W- blocks.1.mlp.proj blocks.1.mlp.proj.weight");
    for (nn::Parameter* p : model->parameters()) EXPECT_EQ(values(p->grad), fused[p->name]) << p->name;
  }
}

TEST(ModuleRunner, ForwardOutsideTrainingKeepsOnlyTheLogits) {
  auto model = models::make_gpt({.n_layer = 4, .n_head = 2, .n_embd = 16, .vocab_size = 11, .seq_len = 8});
  model->materialize(1);
  nn::Batch batch{.tokens = testing::randint({4, 8}, 1, 0, 11), .targets = testing::randint({4, 8}, 2, 0, 11)};
  const std::size_t logits = 4 * 8 * 11 * sizeof(float);
  for (const bool training : {true, false}) {
    HostAllocator activations;
    nn::Runner runner;
    nn::StepState state{.runner = &runner, .training = training, .batch = &batch, .activations = &activations};
    nn::Context ctx(state);
    const models::ModelOutput out = model->run_forward(ctx);
    ASSERT_EQ(out.logits.nbytes(), logits);
    if (training)  // every block's activations wait for backward: more than 4 blocks' inputs alone
      EXPECT_GT(activations.current_bytes(), logits + 4 * 4 * 8 * 16 * sizeof(float));
    else  // evaluation: what each layer kept went when its forward returned
      EXPECT_LE(activations.current_bytes(), logits + 64);
  }
}

TEST(ModuleRunner, TiedParameterIsOwnedOnceAndUsedTwice) {
  auto model = models::make_gpt({.n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = 11, .seq_len = 5});
  model->materialize(1);
  int owners = 0;
  for (nn::Parameter* p : model->parameters()) owners += p->name == "wte.weight";
  EXPECT_EQ(owners, 1);
  // 2 embeddings + per block (2 LN x 2 + 4 linears x 2) + ln_f x 2 = 16 tensors.
  EXPECT_EQ(model->parameters().size(), 16u);
  // Parameters: V*C + T*C + block (12 C^2 + 13 C) + 2C.
  EXPECT_EQ(model->num_parameters(), 11 * 8 + 5 * 8 + 12 * 64 + 13 * 8 + 2 * 8);
}

// A module whose forward fails.
class Failing final : public nn::Module {
 public:
  Tensor forward(const Tensor&, nn::Context&) override { throw std::runtime_error("failing forward"); }
  Tensor backward(const Tensor& dy, nn::Context&) override { return dy; }
};

// Five linears at once on two threads: every module's before-hook comes before any after-hook,
// each output and gradient is the linear's own, handed over once; one failing module's error
// reaches the caller, and the runner hears its hooks around each module again after.
TEST(ModuleRunner, ModulesAtOnceHearTheirHooksAroundTheRun) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  std::vector<std::unique_ptr<nn::Linear>> linears;
  std::vector<nn::Module*> modules;
  std::vector<Tensor> xs, dys;
  for (int i = 0; i < 5; ++i) {
    linears.push_back(std::make_unique<nn::Linear>(6, 4 + i, false, nn::ParameterInit::normal(1.0f)));
    linears.back()->assign_names("linear" + std::to_string(i));
    nn::Parameter& w = *linears.back()->parameters()[0];
    w.data = testing::randn(w.shape, std::uint64_t(10 + i));
    w.grad = Tensor::zeros(w.shape);
    modules.push_back(linears.back().get());
    xs.push_back(testing::randn({3, 6}, std::uint64_t(20 + i)));
    dys.push_back(testing::randn({3, 4 + i}, std::uint64_t(30 + i)));
  }
  RecordingHooks hooks;
  nn::Runner runner;
  runner.add_hooks(&hooks);
  const nn::StepState state{.runner = &runner};
  nn::Context ctx(state);
  const std::vector<std::size_t> slots{0, 1, 2, 3, 4};
  std::vector<Tensor> ys(5), dxs(5);
  ctx.forward_concurrently(modules, xs, slots, [&](std::size_t i, const Tensor& y) { ys[i] = y; });
  ctx.backward_concurrently(modules, dys, slots, [&](std::size_t i, const Tensor& dx) { dxs[i] = dx; });
  ASSERT_EQ(hooks.log.size(), 20u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(hooks.log[i], "F+ linear" + std::to_string(i));
    EXPECT_EQ(hooks.log[5 + i], "F- linear" + std::to_string(4 - i));
    EXPECT_EQ(hooks.log[10 + i], "B+ linear" + std::to_string(i));
    EXPECT_EQ(hooks.log[15 + i], "B- linear" + std::to_string(4 - i));
  }
  for (std::size_t i = 0; i < 5; ++i) {  // against the same linear one at a time
    nn::Parameter& w = *linears[i]->parameters()[0];
    const Tensor grad = w.grad.clone();
    w.grad.zero_();
    nn::Context alone(state);
    ASSERT_TRUE(ys[i].defined() && dxs[i].defined()) << i;
    EXPECT_EQ(values(ys[i]), values(runner.forward(*modules[i], xs[i], alone))) << i;
    EXPECT_EQ(values(dxs[i]), values(runner.backward(*modules[i], dys[i], alone))) << i;
    EXPECT_EQ(values(grad), values(w.grad)) << i;
  }
  Failing failing;
  failing.assign_names("failing");
  modules[2] = &failing;
  EXPECT_THROW(ctx.forward_concurrently(modules, xs, slots, [](std::size_t, const Tensor&) {}), std::runtime_error);
  hooks.log.clear();
  nn::Context after(state);
  runner.forward(*modules[0], xs[0], after);
  EXPECT_EQ(hooks.log, (std::vector<std::string>{"F+ linear0", "F- linear0"}));
  omp_set_num_threads(threads);
}

}  // namespace
}  // namespace tidal
