// Chunk-based ZeRO (src/memory/chunk_manager.h) against one process: each rank runs its slice
// of the global batch through a GPT whose parameters live in chunks shared by the launched ranks,
// at stage 0 (plain data parallelism on chunks) and stages 1, 2 and 3 (with activation
// checkpointing too), with one micro-batch per rank or two accumulated; 5 AdamW steps give the
// single process's losses, and every owned parameter's master copy ends equal to the single
// process's parameter (fp32 tolerance: the gradient sums over ranks round differently). At
// stage 3 only owned param chunks stay between steps. Sharded parameters travel by all-gather or,
// as ZeRO-DP does, by one broadcast per chunk from its owner (ChunkFetch): the same numbers, and
// at stage 3 each iteration's link bytes (counting_communicator.h) are two fetches of the param
// list and one reduce-scatter: 3 (N-1)/N S elements by all-gather, 5 (N-1)/N S by broadcast
// (patrickstar-v1 sec. 6.2's 6 and 10 (p-1)/p M bytes in fp16).
#include "comm/counting_communicator.h"
#include "memory/chunk_manager.h"
#include "models/factory.h"
#include "nn/runner.h"
#include "optim/adamw.h"
#include "support/batches.h"
#include "support/models.h"
#include "support/mpi.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tidal::memory {
namespace {

struct Case {
  int stage;
  bool recompute;
  int micro_batches;  // per rank and step: several accumulate their gradients
  ChunkFetch fetch = ChunkFetch::all_gather;
};

class ZeroChunks : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroChunks, MatchOneProcess) {
  const Case k = GetParam();
  auto world = std::make_shared<comm::CountingCommunicator>(testing::mpi().world(comm::Seconds(60)));
  const int N = world->size(), rank = world->rank();
  const nn::CheckpointPolicy policy{.every = k.recompute ? 1 : 0};
  auto model = models::make_model(testing::tiny_gpt(3), policy), ref = models::make_model(testing::tiny_gpt(3), policy);
  model->materialize(9);
  ref->materialize(9);
  const double M = double(ref->num_parameters());
  // Small chunks, so that there are several communication groups.
  const bool accumulate = k.micro_batches > 1;
  ChunkManager chunks(*model, model->parameters(),
                      {.chunk_elements = 1200,
                       .accumulate = accumulate,
                       .zero_stage = k.stage,
                       .group = world.get(),
                       .fetch = k.fetch});
  // The attention's key bias has a gradient of zero up to rounding (softmax ignores a constant
  // per row); AdamW's eps = 1e-8 turns that noise into updates of ~1e-4 whose sign depends on the
  // summation order (measured: 1.45e-5 apart after 5 steps). eps = 1e-6 keeps such noise inert
  // while every true gradient here is far larger.
  const ops::AdamWOptions opt{.lr = 1e-2f, .eps = 1e-6f, .weight_decay = 0.01f};
  optim::AdamW adam(ref->parameters(), opt);
  nn::Runner runner, ref_runner;
  runner.add_hooks(&chunks);
  const std::int64_t per_rank = 2, B = per_rank * N;
  const double S = double(chunks.layout().chunks) * double(chunks.layout().chunk_elements);
  for (int step = 1; step <= 5; ++step) {
    world->reset();
    nn::Batch batch;
    batch.tokens = testing::randint({B, 8}, 100 + std::uint64_t(step), 0, 40);
    batch.targets = testing::randint({B, 8}, 200 + std::uint64_t(step), 0, 40);
    nn::StepState ref_state{.runner = &ref_runner, .seed = 9, .step = std::uint32_t(step), .batch = &batch};
    nn::Context ref_ctx(ref_state);
    chunks.zero_grad();
    const std::int64_t rows = per_rank / k.micro_batches;
    float local_loss = 0;
    for (int m = 0; m < k.micro_batches; ++m) {
      const nn::Batch mine = testing::batch_rows(batch, rank * per_rank + m * rows, rows);
      nn::StepState state{.runner = &runner, .seed = 9, .step = std::uint32_t(step), .batch = &mine};
      nn::Context ctx(state);
      const float weight = 1.0f / float(N * k.micro_batches);
      local_loss += model->run_forward(ctx).loss * weight;
      chunks.end_forward();
      chunks.set_sync(m + 1 == k.micro_batches);  // stage 0 sums over the ranks once, after the last
      model->run_backward(ctx, weight);  // summed over ranks: the gradient of the mean
      chunks.end_backward();
    }
    Tensor loss = Tensor::full({1}, local_loss);
    world->all_reduce(loss)->wait();
    const float ref_loss = ref->run_forward(ref_ctx).loss;
    EXPECT_NEAR(loss.item(), ref_loss, 1e-5 * std::abs(ref_loss)) << "step " << step;
    ref->zero_grad();
    ref->run_backward(ref_ctx);
    double ref_norm = 0;
    for (nn::Parameter* p : ref->parameters())
      for (std::int64_t i = 0; i < p->grad.numel(); ++i) ref_norm += double(p->grad.data<float>()[i]) * p->grad.data<float>()[i];
    EXPECT_NEAR(chunks.squared_gradient_norm(), ref_norm, 1e-4 * ref_norm) << "step " << step;
    chunks.adamw_step(opt, step);
    adam.step();
    if (k.stage == 0 && accumulate) {
      // Each rank's micro-batches summed in its fp32 grad list, which is all-reduced once: every
      // chunk's elements, and the loss's one.
      EXPECT_EQ(world->stats().at("all_reduce").elements, std::int64_t(S) + 1) << "step " << step;
    }
    if (k.stage == 1 && accumulate) {
      // ... and at stage 1 reduce-scattered once, a call per communication group.
      EXPECT_EQ(world->stats().at("reduce_scatter").calls, chunks.layout().chunks / N) << "step " << step;
      EXPECT_EQ(world->stats().at("reduce_scatter").elements, std::int64_t(S)) << "step " << step;
    }
    if (k.stage == 3 && k.micro_batches == 1) {
      double link = 0;
      for (const auto& [op, stats] : world->stats())
        if (op != "all_reduce") link += stats.link_bytes;  // the loss and the norm are all-reduced
      const double elements = (k.fetch == ChunkFetch::broadcast ? 5 : 3) * double(N - 1) / N * S;
      EXPECT_DOUBLE_EQ(link, 4 * elements) << "step " << step;
    }
  }
  int owned = 0;
  for (std::size_t i = 0; i < chunks.parameters().size(); ++i) {
    const nn::Parameter& p = *chunks.parameters()[i];
    const int chunk = chunks.layout().places[i].chunk;
    if (!chunks.owns(chunk)) {
      EXPECT_EQ(chunks.resident(chunk), k.stage < 3) << p.name;
      EXPECT_GT(k.stage, 0) << p.name;  // stage 0: every rank owns everything
      continue;
    }
    ++owned;
    EXPECT_TRUE(testing::all_close(chunks.slot(ChunkKind::master, p), ref->parameter(p.name).data, testing::kFp32))
        << p.name;
  }
  Tensor total = Tensor::full({1}, float(owned));
  world->all_reduce(total)->wait();
  // Every parameter has one owner (stage 0: N, every rank).
  EXPECT_EQ(int(total.item()), int(chunks.parameters().size()) * (k.stage == 0 ? N : 1));
  // Model data per rank (fp32 param list): the optimizer's 12 bytes per element whole (stage 0:
  // 16M) or sharded, the param list whole (stages 1, 2: 4M + 12M/N) or sharded (stage 3: 16M/N),
  // up to the chunks' padding and fragmentation; accumulation adds a fp32 grad list, sharded as
  // the optimizer's at stages 2 and 3, whole at 0 and 1 (each rank sums its micro-batches).
  const double optimizer = 12 * S / (k.stage == 0 ? 1 : N) + (!accumulate ? 0 : k.stage <= 1 ? 4 * S : 4 * S / N);
  const double expected = (k.stage == 3 ? 4 * S / N : 4 * S) + optimizer;
  EXPECT_EQ(double(chunks.model_data_bytes()), expected);
  EXPECT_LT(S, 1.5 * M);
}

// Parameters every rank holds, summed over a replica group beyond the (absent) data group, as a
// tensor grid's replicated blocks are: each chunk's all-reduce starts in backward once its
// gradients are the step's (the last micro-batch's, with two), so that it runs beside the rest of
// backward; reduce_replicas only waits. The sums are the single process's gradient.
TEST(ZeroChunks, ReplicaSumsStartInTheLastBackward) {
  auto world = std::make_shared<comm::CountingCommunicator>(testing::mpi().world(comm::Seconds(60)));
  const int N = world->size(), rank = world->rank();
  for (const int micro_batches : {1, 2}) {
    auto model = models::make_model(testing::tiny_gpt(3)), ref = models::make_model(testing::tiny_gpt(3));
    model->materialize(9);
    ref->materialize(9);
    ChunkManager chunks(ChunkParameters{.params = model->parameters(),
                                        .segment = {},
                                        .segments = {ChunkSegment{.replicas = {world.get()}}},
                                        .users = {model.get()}},
                        {.chunk_elements = 1200, .accumulate = micro_batches > 1});
    nn::Runner runner, ref_runner;
    runner.add_hooks(&chunks);
    const std::int64_t per_rank = 2, B = per_rank * N, rows = per_rank / micro_batches;
    nn::Batch batch;
    batch.tokens = testing::randint({B, 8}, 101, 0, 40);
    batch.targets = testing::randint({B, 8}, 201, 0, 40);
    world->reset();
    chunks.zero_grad();
    for (int m = 0; m < micro_batches; ++m) {
      const nn::Batch mine = testing::batch_rows(batch, rank * per_rank + m * rows, rows);
      nn::StepState state{.runner = &runner, .seed = 9, .step = 1, .batch = &mine};
      nn::Context ctx(state);
      const float weight = 1.0f / float(N * micro_batches);
      model->run_forward(ctx);
      chunks.end_forward();
      chunks.set_sync(m + 1 == micro_batches);
      model->run_backward(ctx, weight);
      chunks.end_backward();
      // Started with the last micro-batch's backward, a call per chunk; none before it.
      const auto stats = world->stats();  // a copy: the search below looks into it
      const auto started = stats.find("all_reduce");
      EXPECT_EQ(started == stats.end() ? 0 : started->second.calls,
                m + 1 == micro_batches ? chunks.layout().chunks : 0)
          << micro_batches << " micro-batches";
    }
    chunks.reduce_replicas();
    EXPECT_EQ(world->stats().at("all_reduce").calls, chunks.layout().chunks);
    nn::StepState ref_state{.runner = &ref_runner, .seed = 9, .step = 1, .batch = &batch};
    nn::Context ref_ctx(ref_state);
    ref->run_forward(ref_ctx);
    ref->zero_grad();
    ref->run_backward(ref_ctx);
    for (nn::Parameter* p : chunks.parameters())
      EXPECT_TRUE(testing::all_close(chunks.gradient(*p), ref->parameter(p->name).grad, testing::kFp32))
          << p->name << ", " << micro_batches << " micro-batches";
  }
}

// fp16's overflow check: an infinity in one rank's owned gradient (stage 2: no other rank holds
// it) makes the gradient norm, summed over the group, infinite on every rank; every rank skips
// that step (the param list is restored from the unchanged master copy), and the next step trains
// like a single process that skipped it too.
TEST(ZeroChunks, AnOverflowOnOneRankSkipsTheStepOnEvery) {
  auto world = testing::mpi().world(comm::Seconds(60));
  const int N = world->size(), rank = world->rank();
  auto model = models::make_model(testing::tiny_gpt(2)), ref = models::make_model(testing::tiny_gpt(2));
  model->materialize(9);
  ref->materialize(9);
  ChunkManager chunks(*model, model->parameters(), {.chunk_elements = 1200, .zero_stage = 2, .group = world.get()});
  const ops::AdamWOptions opt{.lr = 1e-2f, .eps = 1e-6f};
  optim::AdamW adam(ref->parameters(), opt);
  nn::Runner runner, ref_runner;
  runner.add_hooks(&chunks);
  std::int64_t applied = 0;
  for (int step = 1; step <= 3; ++step) {
    nn::Batch batch;
    batch.tokens = testing::randint({2 * N, 8}, 300 + std::uint64_t(step), 0, 40);
    batch.targets = testing::randint({2 * N, 8}, 400 + std::uint64_t(step), 0, 40);
    const nn::Batch mine = testing::batch_rows(batch, rank * 2, 2);
    nn::StepState state{.runner = &runner, .seed = 9, .step = std::uint32_t(step), .batch = &mine};
    nn::Context ctx(state);
    model->run_forward(ctx);
    chunks.end_forward();
    model->run_backward(ctx, 1.0f / float(N));
    chunks.end_backward();
    const bool overflow_here = step == 2 && rank == N - 1;
    if (overflow_here) {
      for (std::size_t i = 0; i < chunks.parameters().size(); ++i)
        if (chunks.owns(chunks.layout().places[i].chunk)) {
          chunks.gradient(*chunks.parameters()[i]).data<float>()[0] = std::numeric_limits<float>::infinity();
          break;
        }
    }
    const double norm2 = chunks.squared_gradient_norm();
    EXPECT_EQ(std::isfinite(norm2), step != 2) << "step " << step << " rank " << rank;
    if (!std::isfinite(norm2)) {
      chunks.skip_step();
      continue;
    }
    chunks.adamw_step(opt, ++applied);
    nn::StepState ref_state{.runner = &ref_runner, .seed = 9, .step = std::uint32_t(step), .batch = &batch};
    nn::Context ref_ctx(ref_state);
    ref->run_forward(ref_ctx);
    ref->zero_grad();
    ref->run_backward(ref_ctx);
    adam.step();
  }
  for (std::size_t i = 0; i < chunks.parameters().size(); ++i) {
    const nn::Parameter& p = *chunks.parameters()[i];
    EXPECT_EQ(chunks.state(p), TensorState::hold) << p.name;
    if (!chunks.owns(chunks.layout().places[i].chunk)) continue;
    EXPECT_TRUE(testing::all_close(chunks.slot(ChunkKind::master, p), ref->parameter(p.name).data, testing::kFp32))
        << p.name;
    EXPECT_TRUE(testing::all_close(chunks.slot(ChunkKind::param, p), ref->parameter(p.name).data, testing::kFp32))
        << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroChunks,
                         ::testing::Values(Case{0, false, 1}, Case{1, false, 1}, Case{2, false, 1}, Case{3, false, 1},
                                           Case{3, true, 1}, Case{0, false, 2}, Case{1, false, 2}, Case{2, false, 2},
                                           Case{3, true, 2}, Case{1, false, 1, ChunkFetch::broadcast},
                                           Case{3, false, 1, ChunkFetch::broadcast},
                                           Case{3, true, 2, ChunkFetch::broadcast}),
                         [](const auto& info) {
                           return "stage" + std::to_string(info.param.stage) + (info.param.recompute ? "_recomputed" : "") +
                                  (info.param.micro_batches > 1 ? "_accumulated" : "") +
                                  (info.param.fetch == ChunkFetch::broadcast ? "_broadcast" : "");
                         });

}  // namespace
}  // namespace tidal::memory
