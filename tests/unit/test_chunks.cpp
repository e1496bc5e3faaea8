// PatrickStar's chunks (src/memory): the tensor state machine (patrickstar-v2 Fig. 6), chunk
// placement from states, the tensor-to-chunk layout, and the chunk manager driven by the module
// hooks - gradients written over their parameter's slot (Fig. 5) after the last user's backward
// (a tied embedding has two), activation-checkpoint recomputation inside backward, gradient
// accumulation, AdamW on the chunk lists - each against the plain model of the same seed.
#include "memory/chunk_manager.h"
#include "models/factory.h"
#include "nn/runner.h"
#include "optim/adamw.h"
#include "support/batches.h"
#include "support/models.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

namespace tidal::memory {
namespace {

using S = TensorState;

TEST(TensorStates, TransitionsOfFigure6) {
  const S all[] = {S::free, S::compute, S::hold, S::hold_after_fwd, S::hold_after_bwd};
  const std::set<std::pair<S, S>> allowed = {
      {S::free, S::hold},           {S::free, S::compute},          {S::hold, S::compute},
      {S::hold, S::free},           {S::compute, S::hold_after_fwd}, {S::compute, S::hold_after_bwd},
      {S::compute, S::hold},        {S::hold_after_fwd, S::hold},    {S::hold_after_fwd, S::compute},
      {S::hold_after_fwd, S::free}, {S::hold_after_bwd, S::compute}, {S::hold_after_bwd, S::hold},
      {S::hold_after_bwd, S::free}};
  for (S from : all)
    for (S to : all)
      EXPECT_EQ(can_transition(from, to), allowed.count({from, to}) == 1) << state_name(from) << " -> " << state_name(to);
}

TEST(TensorStates, PlacementFollowsStates) {
  EXPECT_EQ(placement_of({S::free, S::free}), Placement::none_needed);
  EXPECT_EQ(placement_of({S::free, S::compute, S::hold}), Placement::computing_device);
  EXPECT_EQ(placement_of({S::hold_after_fwd, S::free}), Placement::anywhere);
  EXPECT_EQ(placement_of({S::hold, S::hold_after_bwd}), Placement::anywhere);
}

TEST(ChunkLayout, ParametersFillChunksInOrder) {
  const ChunkLayout l = layout_chunks({3, 5, 4, 8}, 8);
  ASSERT_EQ(l.places.size(), 4u);
  const std::pair<int, std::int64_t> expected[] = {{0, 0}, {0, 3}, {1, 0}, {2, 0}};  // (chunk, offset)
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_EQ(std::make_pair(l.places[i].chunk, l.places[i].offset), expected[i]) << "parameter " << i;
  EXPECT_EQ(l.chunks, 3);
  EXPECT_DOUBLE_EQ(l.fragmentation(), 1.0 - 20.0 / 24.0);
  // Groups of 2: padded to 4 chunks, owners alternate.
  const ChunkLayout g = layout_chunks({3, 5, 4, 8}, 8, 2);
  EXPECT_EQ(g.chunks, 4);
  EXPECT_EQ(g.group_of(3), 1);
  EXPECT_EQ(g.owner_of(3), 1);
  EXPECT_THROW(layout_chunks({9}, 8), Error);
  // The search finds a size with less waste than the largest parameter's (20%): 20, none.
  const std::vector<std::int64_t> numels = {5, 3, 5, 3, 4};
  EXPECT_DOUBLE_EQ(layout_chunks(numels, 5).fragmentation(), 0.2);
  EXPECT_EQ(search_chunk_size(numels, 1, default_chunk_size_range(numels)), 20);
  // A range below the largest parameter skips those sizes; a range where none fits gives 0.
  EXPECT_EQ(search_chunk_size(numels, 1, {.from = 1, .to = 10, .step = 1}), 8);
  EXPECT_EQ(search_chunk_size(numels, 1, {.from = 1, .to = 4, .step = 1}), 0);
  EXPECT_DOUBLE_EQ(layout_chunks(numels, 20).fragmentation(), 0.0);
}

nn::Batch batch(std::uint64_t key) {
  nn::Batch b;
  b.tokens = testing::randint({2, 8}, key, 0, 40);
  b.targets = testing::randint({2, 8}, key + 1, 0, 40);
  return b;
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// States of the tied table (wte) right after each backward that uses it.
class TiedWatch final : public nn::ModuleHooks {
 public:
  TiedWatch(const ChunkManager& m, const nn::Parameter& p) : manager_(m), p_(p) {}
  void after_backward(nn::Module& m) override {
    for (nn::Parameter* q : m.used_parameters())
      if (q == &p_) seen.push_back(manager_.state(p_));
  }
  std::vector<S> seen;

 private:
  const ChunkManager& manager_;
  const nn::Parameter& p_;
};

// One AdamW step on batch(key) for the model on chunks and for the plain reference; returns their
// losses.
std::pair<float, float> step_both(models::Model& model, ChunkManager& chunks, nn::Runner& runner, models::Model& ref,
                                  optim::AdamW& adam, nn::Runner& ref_runner, const ops::AdamWOptions& opt, int step,
                                  std::uint64_t key) {
  const nn::Batch b = batch(key);
  nn::StepState state{.runner = &runner, .seed = 5, .step = std::uint32_t(step), .batch = &b};
  nn::StepState ref_state = state;
  ref_state.runner = &ref_runner;
  nn::Context ctx(state), ref_ctx(ref_state);
  const float loss = model.run_forward(ctx).loss, ref_loss = ref.run_forward(ref_ctx).loss;
  chunks.end_forward();
  model.run_backward(ctx);
  chunks.end_backward();
  ref.zero_grad();
  ref.run_backward(ref_ctx);
  chunks.adamw_step(opt, step);
  adam.step();
  return {loss, ref_loss};
}

class Chunks : public ::testing::TestWithParam<bool> {};  // activation checkpointing off / on

TEST_P(Chunks, GradientsReuseTheParamSlotAndMatchThePlainModel) {
  const nn::CheckpointPolicy policy{.every = GetParam() ? 1 : 0};
  auto model = models::make_model(testing::tiny_gpt(2), policy), ref = models::make_model(testing::tiny_gpt(2), policy);
  model->materialize(5);
  ref->materialize(5);
  ChunkManager chunks(*model, model->parameters(), {.chunk_elements = 2048});
  for (nn::Parameter* p : model->parameters()) EXPECT_FALSE(p->data.defined()) << p->name;
  nn::Parameter& wte = model->parameter("wte.weight");
  nn::Runner runner, ref_runner;
  TiedWatch watch(chunks, wte);
  runner.add_hooks(&chunks);
  runner.add_hooks(&watch);
  const nn::Batch b = batch(11);
  nn::StepState state{.runner = &runner, .seed = 5, .batch = &b}, ref_state{.runner = &ref_runner, .seed = 5, .batch = &b};
  nn::Context ctx(state), ref_ctx(ref_state);
  const float loss = model->run_forward(ctx).loss;
  EXPECT_EQ(loss, ref->run_forward(ref_ctx).loss);
  for (nn::Parameter* p : model->parameters()) EXPECT_EQ(chunks.state(*p), S::hold_after_fwd) << p->name;
  chunks.end_forward();
  for (nn::Parameter* p : model->parameters()) EXPECT_EQ(chunks.state(*p), S::hold) << p->name;
  model->run_backward(ctx);
  ref->run_backward(ref_ctx);
  chunks.end_backward();
  // The head's backward comes first and leaves the table HOLD (its gradient still growing); the
  // embedding's completes it.
  EXPECT_EQ(watch.seen, (std::vector<S>{S::hold, S::hold_after_bwd}));
  for (nn::Parameter* p : model->parameters()) {
    EXPECT_EQ(chunks.state(*p), S::hold_after_bwd) << p->name;
    EXPECT_FALSE(p->data.defined() || p->grad.defined()) << p->name;
    // The gradient sits where the parameter was.
    EXPECT_TRUE(equal(chunks.slot(ChunkKind::param, *p), ref->parameter(p->name).grad)) << p->name;
  }
  for (int c = 0; c < chunks.layout().chunks; ++c) EXPECT_EQ(chunks.placement(c), Placement::anywhere);
}

TEST_P(Chunks, AdamOnChunksMatchesAdamW) {
  const nn::CheckpointPolicy policy{.every = GetParam() ? 1 : 0};
  auto model = models::make_model(testing::tiny_gpt(2), policy), ref = models::make_model(testing::tiny_gpt(2), policy);
  model->materialize(5);
  ref->materialize(5);
  ChunkManager chunks(*model, model->parameters(), {.chunk_elements = 2048});
  const ops::AdamWOptions opt{.lr = 1e-2f, .weight_decay = 0.01f};
  optim::AdamW adam(ref->parameters(), opt);
  nn::Runner runner, ref_runner;
  runner.add_hooks(&chunks);
  for (int step = 1; step <= 3; ++step) {
    const auto [loss, ref_loss] =
        step_both(*model, chunks, runner, *ref, adam, ref_runner, opt, step, 20 + std::uint64_t(step));
    EXPECT_EQ(loss, ref_loss) << "step " << step;
  }
  for (nn::Parameter* p : model->parameters()) {
    EXPECT_EQ(chunks.state(*p), S::hold) << p->name;
    EXPECT_TRUE(equal(chunks.slot(ChunkKind::master, *p), ref->parameter(p->name).data)) << p->name;
    EXPECT_TRUE(equal(chunks.slot(ChunkKind::param, *p), ref->parameter(p->name).data)) << p->name;
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpointing, Chunks, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "recomputed" : "kept"; });

TEST(Chunks, AccumulationSumsMicroBatchesInTheGradList) {
  auto model = models::make_model(testing::tiny_gpt(2)), ref = models::make_model(testing::tiny_gpt(2));
  model->materialize(5);
  ref->materialize(5);
  ChunkManager chunks(*model, model->parameters(), {.chunk_elements = 2048, .accumulate = true});
  nn::Runner runner, ref_runner;
  runner.add_hooks(&chunks);
  chunks.zero_grad();
  ref->zero_grad();
  for (int m = 0; m < 3; ++m) {
    const nn::Batch b = batch(40 + std::uint64_t(m));
    nn::StepState state{.runner = &runner, .seed = 5, .batch = &b}, ref_state{.runner = &ref_runner, .seed = 5, .batch = &b};
    nn::Context ctx(state), ref_ctx(ref_state);
    EXPECT_EQ(model->run_forward(ctx).loss, ref->run_forward(ref_ctx).loss) << "micro-batch " << m;
    chunks.end_forward();
    model->run_backward(ctx, 1.0f / 3);
    ref->run_backward(ref_ctx, 1.0f / 3);
    chunks.end_backward();
  }
  for (nn::Parameter* p : model->parameters()) {
    // On the host each micro-batch's products add into the grad list's slot itself (sums in
    // place), as the plain model's GEMMs add into its fp32 gradients (beta 1): the same sums.
    EXPECT_TRUE(equal(chunks.gradient(*p), ref->parameter(p->name).grad)) << p->name;
    EXPECT_TRUE(equal(chunks.slot(ChunkKind::param, *p), ref->parameter(p->name).data)) << p->name;  // intact
  }
}

// Mixed precision: the param list in bf16 or fp16 (activations follow it), the master copy and
// AdamW in fp32. The losses of 5 steps stay near the fp32 model's from the same init.
class MixedPrecision : public ::testing::TestWithParam<DType> {};

TEST_P(MixedPrecision, TrainsLikeFp32) {
  const DType compute = GetParam();
  auto model = models::make_model(testing::tiny_gpt(2)), ref = models::make_model(testing::tiny_gpt(2));
  model->materialize(5);
  ref->materialize(5);
  ChunkManager chunks(*model, model->parameters(), {.chunk_elements = 2048, .compute_dtype = compute});
  const ops::AdamWOptions opt{.lr = 1e-2f, .eps = 1e-6f};
  optim::AdamW adam(ref->parameters(), opt);
  nn::Runner runner, ref_runner;
  runner.add_hooks(&chunks);
  double worst = 0;
  for (int step = 1; step <= 5; ++step) {
    const auto [loss, ref_loss] =
        step_both(*model, chunks, runner, *ref, adam, ref_runner, opt, step, 40 + std::uint64_t(step));
    worst = std::max(worst, std::abs(double(loss) - ref_loss) / ref_loss);
  }
  std::printf("%s: worst relative loss difference to fp32 over 5 steps %.3g\n", std::string(dtype_name(compute)).c_str(), worst);
  EXPECT_LT(worst, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Precisions, MixedPrecision, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Chunks, ModelDataBytes) {
  auto model = models::make_model(testing::tiny_gpt(2));
  model->materialize(5);
  const double M = double(model->num_parameters());
  auto bytes = [&](DType compute, bool accumulate) {
    auto m = models::make_model(testing::tiny_gpt(2));
    m->materialize(5);
    ChunkManager chunks(*m, m->parameters(), {.compute_dtype = compute, .accumulate = accumulate});
    const double space = double(chunks.layout().chunks) * double(chunks.layout().chunk_elements);
    EXPECT_EQ(space * (1 - chunks.layout().fragmentation()), M);
    return std::pair{double(chunks.model_data_bytes()), space};
  };
  // fp32 compute: param (reused for the gradient), master, momentum, variance: 16 bytes each.
  auto [fp32, space32] = bytes(DType::f32, false);
  EXPECT_EQ(fp32, 16 * space32);
  // Mixed precision with the gradient in the bf16 param slot: 2 + 4 + 4 + 4 = 14 (PatrickStar's 14M).
  auto [bf16, space16] = bytes(DType::bf16, false);
  EXPECT_EQ(bf16, 14 * space16);
  EXPECT_LT(bf16, 14 * M * 1.1);  // fragmentation under 10%, as the paper reports
  // Accumulating micro-batches adds a fp32 gradient list.
  auto [acc, space_acc] = bytes(DType::bf16, true);
  EXPECT_EQ(acc, 18 * space_acc);
}

}  // namespace
}  // namespace tidal::memory
