// ops/cpu/vec_math.h against libm in double precision, over the whole range the kernels use.
#include "ops/cpu/vec_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace tidal::ops::cpu {

TEST(VecMath, ExpWithinTwoUlpOfTheTrueValue) {
  double worst = 0.0;
  float at = 0.0f;
  for (float x = -86.6f; x <= 88.7f; x += 1.0e-3f) {
    const double truth = std::exp(double(x));
    const double rel = std::abs(double(exp_fast(x)) - truth) / truth;
    if (rel > worst) worst = rel, at = x;
  }
  // 2 ulp of a float is 2 * 2^-23 relative at worst; measured 8.3e-8 (1.4 ulp) at x = 80.76.
  EXPECT_LT(worst, 2.0 * std::ldexp(1.0, -23)) << "at x = " << at;
}

TEST(VecMath, ExpEdges) {
  EXPECT_EQ(exp_fast(0.0f), 1.0f);
  EXPECT_EQ(exp_fast(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_fast(-87.0f), 0.0f);  // 2^n below 2^-125: flushed to zero
  EXPECT_TRUE(std::isnan(exp_fast(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_NEAR(exp_fast(88.7f) / std::exp(double(88.7f)), 1.0, 2.4e-7);  // the largest argument, near FLT_MAX
}

TEST(VecMath, TanhAbsoluteErrorUnderTwoTenthsOfAMillionth) {
  double worst = 0.0;
  for (float x = -20.0f; x <= 20.0f; x += 1.0e-4f) worst = std::max(worst, std::abs(tanh_fast(x) - std::tanh(double(x))));
  EXPECT_LT(worst, 2e-7);  // measured 8.9e-8
  EXPECT_EQ(tanh_fast(0.0f), 0.0f);
  EXPECT_EQ(tanh_fast(50.0f), 1.0f);
  EXPECT_EQ(tanh_fast(-50.0f), -1.0f);
}

TEST(VecMath, ErfAbsoluteErrorUnderSixTenthsOfAMillionth) {
  double worst = 0.0;
  for (float x = -8.0f; x <= 8.0f; x += 1.0e-4f) worst = std::max(worst, std::abs(erf_fast(x) - std::erf(double(x))));
  EXPECT_LT(worst, 6e-7);  // measured 5.1e-7: A&S 7.1.26's 1.5e-7 plus fp32 rounding and exp_fast's error
  EXPECT_EQ(erf_fast(0.0f), 0.0f);
  EXPECT_EQ(erf_fast(10.0f), 1.0f);
  EXPECT_EQ(erf_fast(-10.0f), -1.0f);
}

TEST(VecMath, AVectorisedLoopGivesTheScalarResults) {
  std::vector<float> x(1000), y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -40.0f + 0.07f * float(i);
#pragma omp simd
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = tanh_fast(x[i]) + exp_fast(-std::abs(x[i]));
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], tanh_fast(x[i]) + exp_fast(-std::abs(x[i]))) << i;
}

}  // namespace tidal::ops::cpu
