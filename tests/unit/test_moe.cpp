// A mixture of experts' parts on their own (nn/router.h, ops/expert_rows.h, nn/moe.h); the whole
// block against transformers' Mixtral and Qwen2-MoE is tests/oracle/test_hf_models.cpp.
// - the router's slots: expert-major, tokens in order, first picks before second under a
//   capacity, dropped picks counted, each batch padded; the planned routing spreads picks evenly;
// - its gradient (picks' weights, balance and z losses through the softmax) against central
//   differences of the same losses;
// - the row moves against their loops in double;
// - a block with experts no token reaches (every expert still runs, with no rows) and with a
//   capacity that drops: its output is what the kept picks give;
// - the experts run at once on two threads (nn/moe.h) give what they give one at a time.
#include "nn/moe.h"
#include "nn/runner.h"
#include "ops/expert_rows.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace tidal {
namespace {

using testing::all_close;
using testing::kFp32;
using testing::randn;

TEST(Router, SlotsAreExpertMajorAndCapacityDropsLaterPicks) {
  // 4 tokens, 3 experts, top 2. Token n prefers expert n % 3 then (n + 1) % 3.
  std::vector<float> logits(4 * 3, 0.0f);
  for (int n = 0; n < 4; ++n) {
    logits[std::size_t(n * 3 + n % 3)] = 2.0f;
    logits[std::size_t(n * 3 + (n + 1) % 3)] = 1.0f;
  }
  const nn::Routing r = nn::route(logits.data(), 4, {.experts = 3, .top_k = 2});
  EXPECT_EQ(r.kept, (std::vector<std::int64_t>{3, 3, 2}));
  EXPECT_EQ(r.offset, (std::vector<std::int64_t>{0, 8, 16, 24}));  // each batch padded to 8 rows
  const std::vector<std::int32_t> first(r.token.begin(), r.token.begin() + 8);
  EXPECT_EQ(first, (std::vector<std::int32_t>{0, 2, 3, -1, -1, -1, -1, -1}));  // expert 0: tokens 0, 2, 3
  EXPECT_EQ(r.token[8], 0);
  EXPECT_EQ(r.token[16], 1);
  EXPECT_EQ(r.slot[1], 8) << "token 0's second pick is expert 1's first row";
  EXPECT_EQ(r.expert[0], 0);
  EXPECT_EQ(r.expert[1], 1);
  EXPECT_NEAR(r.weight[0] + r.weight[1], 1.0f, 1e-6);  // renormalized
  EXPECT_EQ(r.dropped, 0);
  // Capacity ceil(0.75 x 4 x 2 / 3) = 2: expert 0 takes the first picks of tokens 0 and 3 and drops
  // token 2's second pick; expert 1 those of token 1 and of token 0's second, and drops token 3's.
  const nn::Routing c = nn::route(logits.data(), 4, {.experts = 3, .top_k = 2, .capacity_factor = 0.75});
  EXPECT_EQ(c.kept, (std::vector<std::int64_t>{2, 2, 2}));
  EXPECT_EQ(c.dropped, 2);
  EXPECT_EQ(c.slot[2 * 2 + 1], -1) << "token 2's second pick (expert 0) is past capacity";
  EXPECT_EQ(c.chosen, r.chosen) << "the balance loss counts picks before capacity";
  const std::shared_ptr<const nn::Routing> plan = nn::planned_routing(5, {.experts = 3, .top_k = 2});
  EXPECT_EQ(plan->kept, (std::vector<std::int64_t>{4, 3, 3}));
}

TEST(Router, ExpertBatchesArePaddedToAFewSizesAnOctave) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> cases = {{0, 0},     {1, 8},      {64, 64},   {65, 72},
                                                                    {128, 128}, {173, 176},  {1000, 1024}};
  for (const auto& [picks, rows] : cases) EXPECT_EQ(nn::padded_rows(picks), rows) << picks;
  std::set<std::int64_t> sizes;
  for (std::int64_t m = 1; m <= 4096; ++m) {
    const std::int64_t p = nn::padded_rows(m);
    EXPECT_GE(p, m);
    EXPECT_LE(8 * p, 9 * m + 56) << "at most an eighth more (or 7 rows below 64)";
    sizes.insert(p);
  }
  EXPECT_LE(sizes.size(), 8u + 6 * 8u) << "8 sizes up to 64, then 8 an octave";
}

// The loss L = sum_{n,j} g_{nj} w_{nj} + a balance + b z, with the routing held fixed (the picks
// are piecewise constant), by central differences of the logits.
TEST(Router, GradientMatchesDifferences) {
  constexpr std::int64_t N = 7, E = 5;
  for (bool normalize : {true, false}) {
    const nn::RouterOptions opt{.experts = E, .top_k = 2, .normalize = normalize};
    const Tensor l = randn({N, E}, 31), g = randn({N, 2}, 32);
    const double a = 0.3, b = 0.07;
    const nn::Routing r = nn::route(l.data<float>(), N, opt);
    auto loss = [&](const std::vector<double>& logits) {
      double total = 0, chosen_p = 0;
      std::vector<double> p_sum(E, 0.0);
      double z = 0;
      for (std::int64_t n = 0; n < N; ++n) {
        double top = -1e30, sum = 0;
        for (std::int64_t e = 0; e < E; ++e) top = std::max(top, logits[std::size_t(n * E + e)]);
        for (std::int64_t e = 0; e < E; ++e) sum += std::exp(logits[std::size_t(n * E + e)] - top);
        z += std::pow(top + std::log(sum), 2);
        double picked = 0;
        for (int j = 0; j < 2; ++j) picked += std::exp(logits[std::size_t(n * E + r.expert[std::size_t(n * 2 + j)])] - top) / sum;
        for (int j = 0; j < 2; ++j) {
          const double p = std::exp(logits[std::size_t(n * E + r.expert[std::size_t(n * 2 + j)])] - top) / sum;
          total += g.data<float>()[n * 2 + j] * (normalize ? p / picked : p);
        }
        for (std::int64_t e = 0; e < E; ++e) p_sum[std::size_t(e)] += std::exp(logits[std::size_t(n * E + e)] - top) / sum;
      }
      for (std::int64_t e = 0; e < E; ++e) chosen_p += r.chosen[std::size_t(e)] * p_sum[std::size_t(e)];
      return total + a * double(E) * chosen_p / double(N * N) + b * z / double(N);
    };
    const std::vector<float> got =
        nn::router_backward(r, opt, g.data<float>(), nn::replica_statistics(r), a, b);
    std::vector<double> x(l.data<float>(), l.data<float>() + N * E);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double h = 1e-4, keep = x[i];
      x[i] = keep + h;
      const double up = loss(x);
      x[i] = keep - h;
      const double down = loss(x);
      x[i] = keep;
      EXPECT_NEAR(got[i], (up - down) / (2 * h), 2e-5) << "logit " << i << (normalize ? " (renormalized)" : "");
    }
    const nn::RouterLosses losses = nn::router_losses(nn::replica_statistics(r), E);
    EXPECT_GT(losses.balance, 0.0);
    EXPECT_NEAR(losses.z, r.lse_squares / N, 1e-9);
  }
}

TEST(ExpertRows, GatherCombineAndDotsAgainstLoops) {
  constexpr std::int64_t N = 5, P = 7, C = 6, K = 2;
  const Tensor x = randn({N, C}, 41), src = randn({P, C}, 42), w = randn({N, K}, 43), s = randn({P}, 44);
  Tensor rows = Tensor::empty({P}, DType::i32), slots = Tensor::empty({N, K}, DType::i32);
  for (std::int64_t p = 0; p < P; ++p) rows.data<std::int32_t>()[p] = std::int32_t((3 * p) % N);
  for (std::int64_t i = 0; i < N * K; ++i) slots.data<std::int32_t>()[i] = i == 3 ? -1 : std::int32_t((2 * i + 1) % P);
  Tensor gathered = Tensor::empty({P, C}), combined = Tensor::empty({N, C}), dots = Tensor::empty({N, K});
  ops::gather_rows(gathered, x, rows, s);
  ops::combine_rows(combined, src, slots, w);
  ops::slot_dots(dots, x, src, slots);
  Tensor g_ref = Tensor::empty({P, C}), c_ref = Tensor::zeros({N, C}), d_ref = Tensor::zeros({N, K});
  for (std::int64_t p = 0; p < P; ++p)
    for (std::int64_t c = 0; c < C; ++c)
      g_ref.data<float>()[p * C + c] = s.data<float>()[p] * x.data<float>()[rows.data<std::int32_t>()[p] * C + c];
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t j = 0; j < K; ++j) {
      const std::int32_t p = slots.data<std::int32_t>()[n * K + j];
      if (p < 0) continue;
      for (std::int64_t c = 0; c < C; ++c) {
        c_ref.data<float>()[n * C + c] += w.data<float>()[n * K + j] * src.data<float>()[p * C + c];
        d_ref.data<float>()[n * K + j] += x.data<float>()[n * C + c] * src.data<float>()[p * C + c];
      }
    }
  EXPECT_TRUE(all_close(gathered, g_ref, kFp32));
  EXPECT_TRUE(all_close(combined, c_ref, kFp32));
  EXPECT_TRUE(all_close(dots, d_ref, kFp32));
  EXPECT_EQ(dots.data<float>()[3], 0.0f) << "a dropped pick's dot product";
}

// A mixture of width 16, its parameters random (by name) and their gradients zero.
std::unique_ptr<nn::MixtureOfExperts> random_mixture(const nn::MoeConfig& cfg) {
  auto moe = std::make_unique<nn::MixtureOfExperts>(16, cfg, nn::ParameterInit::normal(0.5f),
                                                    nn::ParameterInit::normal(0.5f), nn::single_device_layers());
  moe->assign_names("moe");
  for (nn::Parameter* p : moe->parameters()) {
    p->data = randn(p->shape, std::hash<std::string>{}(p->name) % 1000, 0.5f);
    p->grad = Tensor::zeros(p->shape);
  }
  return moe;
}

// 6 tokens over 8 experts, 1 a token: at least two experts get no rows and still run. With a
// capacity of one pick per expert, a token whose expert is full gets nothing from the mixture.
TEST(MixtureOfExperts, IdleExpertsRunAndDroppedTokensGetNothing) {
  for (double capacity : {0.0, 1.0}) {
    nn::MoeConfig cfg{.experts = 8, .experts_per_token = 1, .expert_hidden = 12, .capacity_factor = capacity};
    const auto mixture = random_mixture(cfg);
    nn::MixtureOfExperts& moe = *mixture;
    nn::Runner runner;
    nn::ExpertRecord record;
    const nn::StepState state{.runner = &runner, .experts = &record};
    nn::Context ctx(state);
    const Tensor x = randn({1, 6, 16}, 51);
    const Tensor y = runner.forward(moe, x, ctx).clone();
    const Tensor dx = runner.backward(moe, Tensor::full({1, 6, 16}, 1.0f), ctx);
    ASSERT_EQ(record.layers.size(), 1u);
    const nn::ExpertLoad& load = record.layers.at(0);
    double rows = 0;
    int idle = 0;
    for (double t : load.tokens) {
      rows += t;
      idle += t == 0;
    }
    EXPECT_EQ(rows + load.dropped, 6.0);
    EXPECT_GE(idle, 2);
    EXPECT_TRUE(std::isfinite(dx.data<float>()[0]));
    if (capacity > 0) {
      EXPECT_GT(load.dropped, 0.0) << "6 tokens, 8 experts, 1 each: some expert is picked twice for this seed";
      int zero_rows = 0;
      for (std::int64_t n = 0; n < 6; ++n) {
        bool zero = true;
        for (std::int64_t c = 0; c < 16; ++c) zero = zero && y.data<float>()[n * 16 + c] == 0.0f;
        zero_rows += zero;
      }
      EXPECT_EQ(double(zero_rows), load.dropped);
    }
  }
}

// How many modules' forwards are open at once, at most.
class OpenForwards final : public nn::ModuleHooks {
 public:
  void before_forward(nn::Module&) override { most = std::max(most, ++open); }
  void after_forward(nn::Module&) override { --open; }
  int open = 0, most = 0;
};

// Two threads and eight experts: the experts run at once, each whole on one thread (every
// product on one thread), their hooks all heard before any runs; one thread: one at a time. The
// output, the input's gradient and every parameter's gradient agree (the products' sums may go in
// another order on one thread).
TEST(MixtureOfExperts, ExpertsAtOnceGiveWhatOneAtATimeGives) {
  const int threads = omp_get_max_threads();
  std::map<std::string, Tensor> grads[2];
  Tensor ys[2], dxs[2];
  for (const int run : {0, 1}) {
    omp_set_num_threads(run == 0 ? 1 : 2);
    const nn::MoeConfig cfg{.experts = 8, .experts_per_token = 2, .expert_hidden = 24};
    const auto mixture = random_mixture(cfg);
    nn::MixtureOfExperts& moe = *mixture;
    nn::Runner runner;
    OpenForwards hooks;
    runner.add_hooks(&hooks);
    const nn::StepState state{.runner = &runner};
    nn::Context ctx(state);
    ys[run] = runner.forward(moe, randn({2, 40, 16}, 52), ctx).clone();
    // The block, and an expert and its linear, or the block and 8 experts of 4 modules each.
    EXPECT_EQ(hooks.most, run == 0 ? 3 : 1 + 8 * 4);
    dxs[run] = runner.backward(moe, randn({2, 40, 16}, 53), ctx).clone();
    for (nn::Parameter* p : moe.parameters()) grads[run][p->name] = p->grad.clone();
  }
  omp_set_num_threads(threads);
  EXPECT_TRUE(all_close(ys[1], ys[0], kFp32));
  EXPECT_TRUE(all_close(dxs[1], dxs[0], kFp32));
  ASSERT_EQ(grads[1].size(), grads[0].size());
  for (const auto& [name, g] : grads[0]) EXPECT_TRUE(all_close(grads[1].at(name), g, kFp32)) << name;
}

}  // namespace
}  // namespace tidal
