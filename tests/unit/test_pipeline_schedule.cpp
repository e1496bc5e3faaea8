// Pipeline schedules and stage partitioning. Every rank's action list is run by a simulator
// with the engine's rules (actions in list order; a forward waits for the activation of the
// virtual stage before it, a backward for the gradient of the one after; sends never block):
// each schedule finishes on every rank, runs every forward and backward once, and with forward
// 1 and backward 2 time units its idle fraction per rank is the closed form, (p-1)/(m+p-1) for
// GPipe and 1F1B and (p-1)/(vm+p-1) interleaved. 1F1B keeps at most p - s micro-batches'
// activations alive on rank s; GPipe keeps all m.
#include "config/config.h"
#include "core/error.h"
#include "pipeline/partition.h"
#include "pipeline/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace tidal::pipeline {
namespace {

struct Simulation {
  std::vector<double> idle_fraction;  // per rank: time not computing / the step's length
  std::vector<int> peak_alive;        // per rank: most forwards whose backward has not run yet
};

Simulation simulate(ScheduleKind kind, int p, int m, int v) {
  constexpr double kForward = 1, kBackward = 2;
  const int V = p * v;
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < p; ++s) lists.push_back(schedule(kind, p, s, m, v));
  // finish[{kind, micro, virtual stage}] = time the action completed.
  std::map<std::tuple<int, int, int>, double> finish;
  std::vector<std::size_t> next(p, 0);
  std::vector<double> clock(p, 0), busy(p, 0);
  std::vector<int> alive(p, 0), peak(p, 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < lists[s].size()) {
        const Action a = lists[s][next[s]];
        const int vs = a.chunk * p + s;
        const bool fwd = a.kind == Action::forward;
        double ready = clock[s];
        if (fwd && vs > 0) {
          auto it = finish.find({Action::forward, a.micro_batch, vs - 1});
          if (it == finish.end()) break;
          ready = std::max(ready, it->second);
        }
        if (!fwd) {
          auto it = vs + 1 < V ? finish.find({Action::backward, a.micro_batch, vs + 1})
                               : finish.find({Action::forward, a.micro_batch, vs});
          if (it == finish.end()) break;
          ready = std::max(ready, it->second);
        }
        const double t = fwd ? kForward : kBackward;
        EXPECT_TRUE(finish.emplace(std::tuple{int(a.kind), a.micro_batch, vs}, ready + t).second)
            << "action run twice on virtual stage " << vs;
        clock[s] = ready + t;
        busy[s] += t;
        alive[s] += fwd ? 1 : -1;
        peak[s] = std::max(peak[s], alive[s]);
        ++next[s];
        progressed = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) EXPECT_EQ(next[s], lists[s].size()) << "rank " << s << " is stuck: the schedule deadlocks";
  EXPECT_EQ(finish.size(), std::size_t(2 * m * V));
  const double length = *std::max_element(clock.begin(), clock.end());
  Simulation out;
  for (int s = 0; s < p; ++s) out.idle_fraction.push_back(1.0 - busy[s] / length);
  out.peak_alive = peak;
  return out;
}

TEST(PipelineSchedule, BubblesMatchTheClosedForms) {
  for (int p : {2, 4}) {
    for (int m : {4, 8, 12}) {
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      const double bubble = double(p - 1) / double(m + p - 1);
      const Simulation gpipe = simulate(ScheduleKind::gpipe, p, m, 1);
      const Simulation f1b = simulate(ScheduleKind::one_f_one_b, p, m, 1);
      for (int s = 0; s < p; ++s) {
        EXPECT_NEAR(gpipe.idle_fraction[s], bubble, 1e-12) << "gpipe rank " << s;
        EXPECT_NEAR(f1b.idle_fraction[s], bubble, 1e-12) << "1f1b rank " << s;
        EXPECT_EQ(gpipe.peak_alive[s], m);
        EXPECT_EQ(f1b.peak_alive[s], std::min(m, p - s)) << "1f1b rank " << s;
      }
      for (int v : {2, 3}) {
        const Simulation inter = simulate(ScheduleKind::interleaved, p, m, v);
        const double expected = double(p - 1) / double(v * m + p - 1);
        for (int s = 0; s < p; ++s) EXPECT_NEAR(inter.idle_fraction[s], expected, 1e-12) << "interleaved v " << v;
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBOrder) {
  // Rank 1 of 4, 6 micro-batches: 2 warm-up forwards, then pairs, then 2 backwards.
  using A = Action;
  const std::vector<Action> want = {{A::forward, 0}, {A::forward, 1}, {A::forward, 2}, {A::backward, 0},
                                    {A::forward, 3}, {A::backward, 1}, {A::forward, 4}, {A::backward, 2},
                                    {A::forward, 5}, {A::backward, 3}, {A::backward, 4}, {A::backward, 5}};
  EXPECT_EQ(schedule(ScheduleKind::one_f_one_b, 4, 1, 6), want);
}

TEST(PipelineSchedule, Errors) {
  EXPECT_THROW(config::load_config("", {"parallel.schedule=zigzag"}), Error);
  EXPECT_THROW(schedule(ScheduleKind::interleaved, 4, 0, 6, 2), Error);  // 6 micro-batches, groups of 4
  EXPECT_THROW(schedule(ScheduleKind::one_f_one_b, 2, 0, 4, 2), Error);  // virtual stages need interleaved
}

TEST(PipelinePartition, BalancesCostWithEndsOnTheEndStages) {
  // embedding, 8 blocks, ln_f, head, loss: blocks cost 1 ("layers").
  const std::vector<double> layers = {0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
  EXPECT_EQ(partition(layers, 2), (std::vector<int>{0, 5, 12}));
  EXPECT_EQ(partition(layers, 4), (std::vector<int>{0, 3, 5, 7, 12}));
  EXPECT_EQ(partition(layers, 8), (std::vector<int>{0, 2, 3, 4, 5, 6, 7, 8, 12}));
  // 3 blocks on 2 stages: the earlier stage takes the extra one.
  EXPECT_EQ(partition({0, 1, 1, 1, 0}, 2), (std::vector<int>{0, 3, 5}));
  // By parameters: a heavy embedding and head pull blocks to the middle stages.
  EXPECT_EQ(partition({6, 2, 2, 2, 2, 2, 2, 6}, 3), (std::vector<int>{0, 2, 6, 8}));
  // The end stages are the bottleneck (5); the middle ones share the other blocks evenly (3 | 2,
  // not 4 | 1), the earlier taking the extra one.
  EXPECT_EQ(partition({5, 1, 1, 1, 1, 1, 5}, 4), (std::vector<int>{0, 1, 4, 6, 7}));
  EXPECT_THROW(partition(layers, 9), Error);
}

}  // namespace
}  // namespace tidal::pipeline
