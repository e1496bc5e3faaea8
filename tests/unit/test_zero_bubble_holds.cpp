// ZB-H1's W's held back per stage as a run finds them before its first step (sim::zero_bubble_holds,
// engine/trainer.cpp): the step replayed on shape-only tensors as 1F1B and with each W right after
// its B, the counts within parallel.zb_memory of 1F1B's largest stage's activations. The GPT of
// docs/results/2026-11-30-zero-bubble-3.md (8 layers, width 256, m = 8), whose runs measured the
// same counts and peaks within 5% of 1F1B's at 1.05 (tests/mpi/check_zero_bubble.sh runs them).
#include "config/config.h"
#include "engine/planning/job.h"
#include "sim/cost_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tidal {
namespace {

config::Config gpt(int pipeline, const std::string& zb_memory, const std::string& schedule = "zb-h1") {
  return config::load_config("", {"model.n_layer=8", "model.n_embd=256", "model.n_head=4", "model.seq_len=128",
                                  "model.vocab_size=512", "train.batch_size=16", "train.micro_batch_size=2",
                                  "train.device=cpu", "parallel.pipeline=" + std::to_string(pipeline),
                                  "parallel.schedule=" + schedule, "parallel.zb_memory=" + zb_memory});
}

std::vector<int> holds(const config::Config& cfg, int world_size) {
  return sim::zero_bubble_holds(engine::job_of(cfg), world_size);
}

TEST(ZeroBubbleHolds, WithinFivePercentTheLastStageHoldsOneFewer) {
  // The last stage's head and loss beside its held W's: the paper's three pass 1F1B's largest
  // stage by 10%, two stay within 5%.
  EXPECT_EQ(holds(gpt(4, "1.05"), 4), (std::vector<int>{0, 1, 2, 2}));
  EXPECT_EQ(holds(gpt(4, "1.15"), 4), (std::vector<int>{0, 1, 2, 3}));
  // At pipeline 2 one W is half the last stage's room: none fits within 5%, one within twice.
  EXPECT_EQ(holds(gpt(2, "1.05"), 2), (std::vector<int>{0, 0}));
  EXPECT_EQ(holds(gpt(2, "2"), 2), (std::vector<int>{0, 1}));
}

TEST(ZeroBubbleHolds, TheSameOnEveryRankAndWithData) {
  // Every rank replays the same step: one answer, whichever rank asks and however often; data
  // replicas hold a stage's count alike.
  const config::Config cfg = gpt(4, "1.05");
  EXPECT_EQ(holds(cfg, 4), holds(cfg, 4));
  config::Config data2 = config::load_config("", {"model.n_layer=8", "model.n_embd=256", "model.n_head=4",
                                                  "model.seq_len=128", "model.vocab_size=512",
                                                  "train.batch_size=32", "train.micro_batch_size=2",
                                                  "train.device=cpu", "parallel.pipeline=4", "parallel.data=2",
                                                  "parallel.schedule=zb-h1"});
  EXPECT_EQ(holds(data2, 8), (std::vector<int>{0, 1, 2, 2}));
}

TEST(ZeroBubbleHolds, ThePapersCountAndOtherSchedulesNeedNoReplay) {
  EXPECT_TRUE(holds(gpt(4, "0"), 4).empty());
  EXPECT_TRUE(holds(gpt(4, "1.05", "1f1b"), 4).empty());
  EXPECT_TRUE(holds(gpt(1, "1.05"), 1).empty());
}

}  // namespace
}  // namespace tidal
