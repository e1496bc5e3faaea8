// Philox known-answer vectors (Random123's kat_vectors) and the sharded-init guarantee: a block
// of a parameter generated alone equals the same block of the full parameter, bit for bit.
#include "core/init.h"
#include "core/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace tidal {

TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(ShardedInit, BlockEqualsSliceOfFullTensorBitwise) {
  const Shape full{37, 72};
  const InitKey key{1234, 99};
  Tensor whole = Tensor::empty(full);
  init_normal(whole, key, 0.0f, 0.02f, full);
  // A 2-d block (as a 2D tensor-parallel shard would own) and a row block (1D).
  for (auto [r0, r1, c0, c1] : {std::array<std::int64_t, 4>{5, 19, 24, 48}, std::array<std::int64_t, 4>{0, 37, 36, 72},
                                std::array<std::int64_t, 4>{36, 37, 0, 1}}) {
    Tensor block = Tensor::empty({r1 - r0, c1 - c0});
    init_normal(block, key, 0.0f, 0.02f, full, {r0, c0});
    for (std::int64_t r = r0; r < r1; ++r)
      ASSERT_EQ(std::memcmp(block.data<float>() + (r - r0) * (c1 - c0), whole.data<float>() + r * 72 + c0,
                            std::size_t(c1 - c0) * 4),
                0)
          << "row " << r;
  }
  // A 3-d block (3D parallelism splits along more than two axes).
  const Shape full3{4, 6, 10};
  Tensor w3 = Tensor::empty(full3), b3 = Tensor::empty({2, 3, 5});
  init_normal(w3, key, 0.0f, 1.0f, full3);
  init_normal(b3, key, 0.0f, 1.0f, full3, {2, 3, 5});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 5; ++k)
        ASSERT_EQ(b3.data<float>()[(i * 3 + j) * 5 + k], w3.data<float>()[((i + 2) * 6 + j + 3) * 10 + k + 5]);
}

TEST(ShardedInit, NormalStatisticsAndKeySeparation) {
  const Shape s{200000};
  Tensor a = Tensor::empty(s), b = Tensor::empty(s);
  init_normal(a, {7, 1}, 0.5f, 2.0f, s);
  init_normal(b, {7, 2}, 0.5f, 2.0f, s);
  double sum = 0, sq = 0, cross = 0;
  for (std::int64_t i = 0; i < s[0]; ++i) {
    const double x = a.data<float>()[i];
    sum += x;
    sq += x * x;
    cross += (x - 0.5) * (b.data<float>()[i] - 0.5);
  }
  const double n = double(s[0]), mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.02);                    // 4.5 standard errors (2/sqrt(2e5) = 0.0045)
  EXPECT_NEAR(std::sqrt(var), 2.0, 0.02);
  EXPECT_NEAR(cross / n / 4.0, 0.0, 0.015);        // different parameter ids are uncorrelated
}

}  // namespace tidal
