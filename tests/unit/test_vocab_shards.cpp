// The vocabulary split into shards (1D tensor parallelism's embedding and loss). Cross-entropy
// (ops/cross_entropy.h's shard ops): the shards' terms summed and maxed as the tensor group's
// all-reduces do, against the whole rows' cross_entropy_forward: the log-sum-exp and the losses,
// with ignored rows and a shard of padding only; a target outside the classes named. The
// embedding's ids rebased to a shard (ops::embedding_shard_ids): every shard's lookup summed
// equals the whole table's; an id outside the vocabulary named.
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/residual.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

namespace tidal {
namespace {

using testing::all_close;

struct Rows {
  Tensor lse, losses;
};

// The shard ops on `shards` shards of `width` classes each (the last ones past V padding, as
// nn/tp/cross_entropy.cpp pads the vocabulary).
Rows sharded(const Tensor& logits, const Tensor& targets, int shards, std::int64_t width) {
  const std::int64_t N = logits.dim(0), V = logits.dim(1);
  std::vector<Tensor> lse, losses, local;
  Tensor max_lse = Tensor::full({N}, -std::numeric_limits<float>::infinity());
  for (int s = 0; s < shards; ++s) {
    const std::int64_t first = s * width, real = std::clamp<std::int64_t>(V - first, 0, width);
    local.push_back(Tensor::empty({N}, DType::i32));
    ops::cross_entropy_shard_targets(local.back(), targets, first, width, V);
    lse.push_back(Tensor::empty({N}));
    losses.push_back(Tensor::empty({N}));
    if (real == 0) {
      losses.back().zero_();
      lse.back().fill_(-std::numeric_limits<float>::infinity());
    } else {
      ops::cross_entropy_forward(losses.back(), lse.back(), logits.slice(1, first, first + real).clone(), local.back());
    }
    for (std::int64_t i = 0; i < N; ++i)
      max_lse.data<float>()[i] = std::max(max_lse.data<float>()[i], lse.back().data<float>()[i]);
  }
  Tensor total = Tensor::zeros({N, 2});
  for (int s = 0; s < shards; ++s) {
    Tensor terms = Tensor::empty({N, 2});
    ops::cross_entropy_shard_terms(terms, lse[std::size_t(s)], max_lse, losses[std::size_t(s)], local[std::size_t(s)]);
    ops::accumulate(total, terms);
  }
  Rows out{Tensor::empty({N}), Tensor::empty({N})};
  ops::cross_entropy_shard_combine(out.lse, out.losses, max_lse, total, local[0]);
  return out;
}

TEST(CrossEntropyShards, CombinedShardsEqualTheWholeRows) {
  const std::int64_t N = 29, V = 50;
  const Tensor logits = testing::randn({N, V}, 1, 3.0f);
  Tensor targets = testing::randint({N}, 2, 0, std::int32_t(V));
  targets.data<std::int32_t>()[3] = ops::kIgnoreIndex;
  targets.data<std::int32_t>()[17] = ops::kIgnoreIndex;
  Tensor lse = Tensor::empty({N}), losses = Tensor::empty({N});
  ops::cross_entropy_forward(losses, lse, logits, targets);
  // 2 shards of 25; 3 of 17 (one padding class); 4 of 16 (14 padding); 8 of 7 (the last all padding).
  for (const auto& [shards, width] : {std::pair{2, 25}, {3, 17}, {4, 16}, {8, 7}}) {
    SCOPED_TRACE(shards);
    const Rows r = sharded(logits, targets, shards, width);
    EXPECT_TRUE(all_close(r.lse, lse, testing::kFp32));
    EXPECT_TRUE(all_close(r.losses, losses, testing::kFp32));
    EXPECT_EQ(r.losses.data<float>()[3], 0.0f);
  }
}

TEST(CrossEntropyShards, ATargetOutsideTheClassesIsNamed) {
  Tensor targets = Tensor::zeros({4}, DType::i32), local = Tensor::empty({4}, DType::i32);
  targets.data<std::int32_t>()[2] = 50;
  try {
    ops::cross_entropy_shard_targets(local, targets, 0, 25, 50);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 50 at position 2 is outside the 50 classes"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("model.vocab_size"), std::string::npos) << e.what();
  }
}

TEST(EmbeddingShards, EveryShardsLookupSummedIsTheWholeTables) {
  const std::int64_t V = 50, C = 6;
  const Tensor table = testing::randn({V, C}, 1), ids = testing::randint({3, 11}, 2, 0, std::int32_t(V));
  Tensor whole = Tensor::empty({3, 11, C});
  ops::embedding_forward(whole, ids, table);
  for (const std::int64_t width : {25, 17}) {  // 17: the last shard's rows past V are padding
    SCOPED_TRACE(width);
    Tensor sum = Tensor::zeros({3, 11, C});
    for (std::int64_t first = 0; first < V; first += width) {
      Tensor local = Tensor::empty(ids.shape(), DType::i32);
      ops::embedding_shard_ids(local, ids, first, width, V);
      Tensor shard = Tensor::zeros({width, C});
      const std::int64_t real = std::min(width, V - first);
      shard.slice(0, 0, real).copy_from(table.slice(0, first, first + real));
      ops::embedding_forward(sum, local, shard, /*accumulate=*/true);
    }
    EXPECT_TRUE(all_close(sum, whole, testing::kFp32));
  }
}

TEST(EmbeddingShards, AnIdOutsideTheVocabularyIsNamed) {
  Tensor ids = Tensor::zeros({5}, DType::i32), local = Tensor::empty({5}, DType::i32);
  ids.data<std::int32_t>()[4] = -1;
  try {
    ops::embedding_shard_ids(local, ids, 0, 25, 50);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id -1 at position 4 is outside the vocabulary [0, 50): check "
                                         "model.vocab_size"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tidal
