// The vocabulary split into shards on the GPU against the CPU backend on the same inputs: the
// loss's row figures (ops/cross_entropy.h's shard ops: targets rebased to a shard with ignored
// rows and other shards' classes, the terms the shards sum, the combined log-sum-exp and losses)
// and the embedding's ids rebased to a shard; a target or id outside the classes named as on the
// CPU.
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tidal {
namespace {

using testing::all_close;
using testing::gpu_empty;
using testing::to_gpu;
using testing::to_host;

// exp and log: the GPU's expf / logf against the CPU's libm, a few fp32 ulps apart.
constexpr testing::Tolerance kRows{1e-6, 1e-5};

TEST(CudaCrossEntropyShards, AgainstTheCpu) {
  TIDAL_REQUIRE_GPU();
  const std::int64_t N = 1000, V = 300, first = 100, count = 100;
  Tensor targets = testing::randint({N}, 1, 0, std::int32_t(V));
  for (std::int64_t i = 0; i < N; i += 7) targets.data<std::int32_t>()[i] = ops::kIgnoreIndex;
  Tensor local = Tensor::empty({N}, DType::i32), glocal = gpu_empty({N}, DType::i32);
  ops::cross_entropy_shard_targets(local, targets, first, count, V);
  ops::cross_entropy_shard_targets(glocal, to_gpu(targets), first, count, V);
  const Tensor glocal_here = to_host(glocal);
  EXPECT_EQ(std::memcmp(glocal_here.raw(), local.raw(), local.nbytes()), 0);

  const Tensor lse = testing::randn({N}, 2, 3.0f), losses = testing::rand_uniform({N}, 3, 0.0f, 5.0f);
  const Tensor max_lse = testing::rand_uniform({N}, 4, 3.0f, 4.0f);
  Tensor terms = Tensor::empty({N, 2}), gterms = gpu_empty({N, 2});
  ops::cross_entropy_shard_terms(terms, lse, max_lse, losses, local);
  ops::cross_entropy_shard_terms(gterms, to_gpu(lse), to_gpu(max_lse), to_gpu(losses), glocal);
  EXPECT_TRUE(all_close(gterms, terms, kRows));

  Tensor out_lse = Tensor::empty({N}), out_losses = Tensor::empty({N});
  Tensor gout_lse = gpu_empty({N}), gout_losses = gpu_empty({N});
  ops::cross_entropy_shard_combine(out_lse, out_losses, max_lse, terms, local);
  ops::cross_entropy_shard_combine(gout_lse, gout_losses, to_gpu(max_lse), to_gpu(terms), glocal);
  EXPECT_TRUE(all_close(gout_lse, out_lse, kRows));
  EXPECT_TRUE(all_close(gout_losses, out_losses, kRows));
}

TEST(CudaCrossEntropyShards, ATargetOutsideTheClassesIsNamed) {
  TIDAL_REQUIRE_GPU();
  Tensor targets = Tensor::zeros({40}, DType::i32);
  targets.data<std::int32_t>()[31] = -3;
  targets.data<std::int32_t>()[33] = 900;
  Tensor local = gpu_empty({40}, DType::i32);
  try {
    ops::cross_entropy_shard_targets(local, to_gpu(targets), 0, 25, 50);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target -3 at position 31 is outside the 50 classes"), std::string::npos)
        << e.what();
  }
}

TEST(CudaEmbeddingShards, AgainstTheCpu) {
  TIDAL_REQUIRE_GPU();
  const Tensor ids = testing::randint({7, 130}, 1, 0, 1000);
  Tensor local = Tensor::empty(ids.shape(), DType::i32), glocal = gpu_empty(ids.shape(), DType::i32);
  ops::embedding_shard_ids(local, ids, 250, 250, 1000);
  ops::embedding_shard_ids(glocal, to_gpu(ids), 250, 250, 1000);
  const Tensor here = to_host(glocal);
  EXPECT_EQ(std::memcmp(here.raw(), local.raw(), local.nbytes()), 0);
  Tensor bad = ids.clone();
  bad.data<std::int32_t>()[500] = 1000;
  try {
    ops::embedding_shard_ids(glocal, to_gpu(bad), 250, 250, 1000);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 1000 at position 500 is outside the vocabulary"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tidal
