// Dropout against closed-form properties: the kept fraction, the 1/(1-p) scale, the same mask in
// backward, determinism from the keys, and shards that reproduce the full tensor's mask.
#include "ops/dropout.h"
#include "support/random.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tidal {
namespace {

TEST(Dropout, KeepsAboutOneMinusPAndScales) {
  const std::int64_t n = 100003;
  const float p = 0.3f;
  Tensor x = Tensor::full({n}, 2.0f), y = Tensor::empty({n});
  const ops::DropoutKey key{.seed = 1, .layer = 77, .step = 3, .micro_batch = 1};
  ops::dropout_forward(y, x, p, key);
  std::int64_t kept = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = y.data<float>()[i];
    ASSERT_TRUE(v == 0.0f || std::fabs(v - 2.0f / 0.7f) < 1e-6f) << v;
    kept += v != 0.0f;
  }
  // Binomial(n, 0.7): standard deviation sqrt(n * 0.21) = 145; allow 5 of them.
  EXPECT_NEAR(double(kept), 0.7 * double(n), 5 * 145.0);
}

TEST(Dropout, BackwardUsesTheForwardMaskAndKeysSeparateMasks) {
  const std::int64_t n = 4099;
  Tensor x = testing::randn({n}, 1), y = Tensor::empty({n}), dx = Tensor::empty({n});
  Tensor ones = Tensor::full({n}, 1.0f);
  const ops::DropoutKey key{.seed = 9, .layer = 5, .step = 11, .micro_batch = 0};
  ops::dropout_forward(y, x, 0.5f, key);
  ops::dropout_backward(dx, ones, 0.5f, key);
  for (std::int64_t i = 0; i < n; ++i)
    ASSERT_EQ(y.data<float>()[i], dx.data<float>()[i] * x.data<float>()[i]) << i;
  // Another step, micro-batch or layer gives another mask.
  for (ops::DropoutKey other : {ops::DropoutKey{9, 5, 12, 0, 0}, ops::DropoutKey{9, 5, 11, 1, 0}, ops::DropoutKey{9, 6, 11, 0, 0}}) {
    Tensor z = Tensor::empty({n});
    ops::dropout_forward(z, x, 0.5f, other);
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < n; ++i) differ += (z.data<float>()[i] == 0.0f) != (y.data<float>()[i] == 0.0f);
    EXPECT_GT(differ, n / 4);
  }
}

TEST(Dropout, AShardReproducesItsSliceOfTheFullMask) {
  const std::int64_t n = 1000;
  Tensor x = testing::randn({n}, 2), full = Tensor::empty({n});
  const ops::DropoutKey key{.seed = 3, .layer = 4, .step = 5, .micro_batch = 6};
  ops::dropout_forward(full, x, 0.25f, key);
  for (std::int64_t begin : {0, 1, 3, 333, 997}) {
    const std::int64_t end = std::min(n, begin + 257);
    Tensor part = x.slice(0, begin, end).clone(), out = Tensor::empty({end - begin});
    ops::DropoutKey k = key;
    k.first_element = begin;
    ops::dropout_forward(out, part, 0.25f, k);
    for (std::int64_t i = begin; i < end; ++i) ASSERT_EQ(out.data<float>()[i - begin], full.data<float>()[i]) << i;
  }
}

}  // namespace
}  // namespace tidal
