// Dynamic loss scaling (src/optim/loss_scaler.h): halved on an overflow, never below the floor,
// doubled after a window of finite steps, restored from a checkpoint's values.
#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

namespace tidal::optim {
namespace {

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterAWindow) {
  LossScaler s({.initial = 1024, .window = 3});
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.good_steps(), 2);
  EXPECT_TRUE(s.update(true));  // the third finite step in a row
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));  // an overflow restarts the count
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.good_steps(), 0);
}

TEST(LossScaler, NeverBelowTheFloor) {
  LossScaler s({.initial = 4, .window = 10, .min_scale = 1});
  for (int i = 0; i < 5; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 1);
}

TEST(LossScaler, RestoresACheckpointedState) {
  LossScaler s({.initial = 65536, .window = 2});
  s.restore(128, 1);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 256);
}

}  // namespace
}  // namespace tidal::optim
