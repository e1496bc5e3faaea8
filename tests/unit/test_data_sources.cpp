// Token data read in place: Megatron's indexed datasets written and read back (and a damaged index
// reported by name), blends by weight (each source's share of any prefix within a sample of its
// weight, the same draws by any access order), data.path's blend form, and packed documents
// (positions restarting at each document, no target across a document's end).
#include "core/error.h"
#include "data/blend.h"
#include "data/indexed_dataset.h"
#include "data/stream_dataset.h"
#include "data/token_shards.h"
#include "ops/cross_entropy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace tidal {
namespace {
namespace fs = std::filesystem;

std::string temp(const char* what) {
  return (fs::temp_directory_path() / fmt::format("{}-{}", what, ::getpid())).string();
}

TEST(IndexedDataset, WrittenDocumentsReadBackTokenForToken) {
  const std::string prefix = temp("indexed");
  for (const bool wide : {false, true}) {
    std::vector<std::vector<std::uint32_t>> docs;
    data::IndexedDatasetWriter writer(prefix, wide);
    for (std::uint32_t d = 0; d < 50; ++d) {
      std::vector<std::uint32_t> doc;
      for (std::uint32_t t = 0; t < 1 + (d * 7) % 23; ++t) doc.push_back(d * 1000 + t + (wide ? 70000 : 0));
      writer.append(doc.data(), doc.size());
      writer.end_document();
      docs.push_back(doc);
    }
    writer.finish();
    const data::IndexedDataset ds(prefix);
    ASSERT_EQ(ds.documents(), 50);
    ASSERT_EQ(ds.sequences(), 50);
    EXPECT_EQ(ds.token_bytes(), wide ? 4 : 2);
    std::int64_t total = 0;
    for (std::int64_t d = 0; d < 50; ++d) {
      ASSERT_EQ(ds.document_index(d), d);
      const std::int64_t s = ds.document_index(d);
      ASSERT_EQ(ds.sequence_length(s), std::int64_t(docs[std::size_t(d)].size()));
      ASSERT_EQ(ds.sequence_start(s), total);
      std::vector<std::int32_t> got(docs[std::size_t(d)].size());
      ds.read(ds.sequence_start(s), std::int64_t(got.size()), got.data());
      EXPECT_EQ(std::vector<std::int32_t>(docs[std::size_t(d)].begin(), docs[std::size_t(d)].end()), got) << d;
      total += std::int64_t(got.size());
    }
    EXPECT_EQ(ds.document_index(50), 50);
    EXPECT_EQ(ds.tokens(), total);
  }
  // A truncated data file, and an index that is not one: errors naming the file.
  fs::resize_file(prefix + ".bin", fs::file_size(prefix + ".bin") - 4);
  try {
    data::IndexedDataset bad(prefix);
    ADD_FAILURE() << "a truncated .bin opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".bin"), std::string::npos) << e.what();
  }
  std::ofstream(prefix + ".idx") << "not an index at all, but long enough to be read";
  EXPECT_THROW(data::IndexedDataset{prefix}, Error);
  fs::remove(prefix + ".bin");
  fs::remove(prefix + ".idx");
}

// A batch's positions and targets against the rule, from each sample's tokens and the tokens that
// start documents in its window (`starts`, offsets in (0, seq_len]).
void expect_packed(const nn::Batch& b, std::int64_t i, const std::vector<std::int32_t>& window,
                   const std::vector<bool>& starts, std::int64_t T) {
  std::int32_t pos = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    if (starts[std::size_t(t)]) pos = 0;
    ASSERT_EQ(b.positions.data<std::int32_t>()[i * T + t], pos++) << "sample " << i << " token " << t;
    const std::int32_t target = starts[std::size_t(t + 1)] ? ops::kIgnoreIndex : window[std::size_t(t + 1)];
    ASSERT_EQ(b.targets.data<std::int32_t>()[i * T + t], target) << "sample " << i << " token " << t;
    ASSERT_EQ(b.tokens.data<std::int32_t>()[i * T + t], window[std::size_t(t)]);
  }
}

// Token shards split at the end-of-text id (which stays its document's last token), and an
// indexed dataset at its own documents (binary-searched, against a walk over them).
TEST(PackedDocuments, PositionsRestartAndNoTargetCrossesADocumentEnd) {
  const std::int64_t T = 16, eod = 99;
  std::vector<std::uint32_t> stream;
  std::vector<std::vector<std::uint32_t>> docs;
  for (std::uint32_t d = 0; d < 60; ++d) {
    std::vector<std::uint32_t> doc;
    for (std::uint32_t t = 0; t < (d * 5) % 13; ++t) doc.push_back((d + t) % 90);
    doc.push_back(eod);  // an empty document is its end-of-text token alone
    docs.push_back(doc);
    stream.insert(stream.end(), doc.begin(), doc.end());
  }
  const std::string shard = temp("packed") + ".bin", prefix = temp("packed-indexed");
  data::write_token_file(shard, stream, false);
  data::IndexedDatasetWriter writer(prefix, false);
  for (const auto& doc : docs) {
    writer.append(doc.data(), doc.size());
    writer.end_document();
  }
  writer.finish();

  for (const bool indexed : {false, true}) {
    SCOPED_TRACE(indexed ? "indexed" : "token shards");
    std::unique_ptr<data::TokenStream> stream_in;
    if (indexed) stream_in = std::make_unique<data::IndexedDataset>(prefix);
    else stream_in = std::make_unique<data::TokenShards>(shard, "data.path");
    const data::StreamDataset ds(std::move(stream_in), false, T, 100, data::Objective::causal, 3, "packed",
                                 {.documents = true, .eod_id = indexed ? -1 : std::int32_t(eod)});
    const std::int64_t n = ds.windows(data::Split::train);
    const nn::Batch b = ds.batch(0, n, data::Split::train);
    ASSERT_TRUE(b.positions.defined());
    std::int64_t boundaries = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t first = ds.window(i, data::Split::train) * (T + 1);
      const std::vector<std::int32_t> window(stream.begin() + first, stream.begin() + first + T + 1);
      std::vector<bool> starts(std::size_t(T + 1), false);  // the token before is an end-of-text id
      for (std::int64_t t = 1; t <= T; ++t) starts[std::size_t(t)] = window[std::size_t(t - 1)] == eod;
      boundaries += std::count(starts.begin(), starts.end(), true);
      expect_packed(b, i, window, starts, T);
    }
    EXPECT_GT(boundaries, n);  // several documents a window
  }
  // Without packing, no positions and every target is the next token.
  const data::StreamDataset plain(std::make_unique<data::TokenShards>(shard, "data.path"), false, T, 100,
                                  data::Objective::causal, 3, "plain");
  EXPECT_FALSE(plain.batch(0, 2, data::Split::train).positions.defined());
  // Shards record no documents: packing them needs the end-of-text id.
  EXPECT_THROW(data::StreamDataset(std::make_unique<data::TokenShards>(shard, "data.path"), false, T, 100,
                                   data::Objective::causal, 3, "shards", {.documents = true}),
               Error);
  fs::remove(shard);
  fs::remove(prefix + ".bin");
  fs::remove(prefix + ".idx");
}

TEST(Blend, SharesFollowTheWeightsAndAnyOrderDrawsAlike) {
  const data::Blend blend({0.5, 0.3, 0.2});
  const std::int64_t n = 100000;
  std::vector<std::int64_t> count(3, 0);
  std::vector<std::pair<int, std::int64_t>> draws;
  for (std::int64_t i = 0; i < n; ++i) {
    draws.push_back(blend.at(i));
    const auto [source, own] = draws.back();
    ASSERT_EQ(own, count[std::size_t(source)]) << "each source's samples in its own order";
    ++count[std::size_t(source)];
    if (i % 997 != 0) continue;  // every prefix within a sample of its weight's share
    for (int k = 0; k < 3; ++k)
      ASSERT_LE(std::abs(double(count[std::size_t(k)]) - blend.weights()[std::size_t(k)] * double(i + 1)), 1.0 + 1e-9);
  }
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(double(count[std::size_t(k)]) / n, blend.weights()[std::size_t(k)], 1e-4);
  EXPECT_EQ(blend.drawn(n), count);
  // Another blend of the same weights, read backwards and at random: the same draws (a resumed
  // run, another rank's slice).
  const data::Blend again({5, 3, 2});
  for (std::int64_t i = n - 1; i >= n - 300; --i) ASSERT_EQ(again.at(i), draws[std::size_t(i)]) << i;
  for (std::int64_t i : {std::int64_t(7), std::int64_t(65536), std::int64_t(65535), std::int64_t(99999),
                         std::int64_t(70000), std::int64_t(3)})
    ASSERT_EQ(again.at(i), draws[std::size_t(i)]) << i;
}

TEST(Blend, DataPathsBlendForm) {
  using Parts = std::vector<std::pair<double, std::string>>;
  EXPECT_EQ(data::parse_blend("train.bin", "data.path"), (Parts{{1.0, "train.bin"}}));
  EXPECT_EQ(data::parse_blend("shards/train_*.bin", "data.path"), (Parts{{1.0, "shards/train_*.bin"}}));
  EXPECT_EQ(data::parse_blend("0.7 a.bin 0.3 b/", "data.path"), (Parts{{0.7, "a.bin"}, {0.3, "b/"}}));
  EXPECT_EQ(data::parse_blend(" 2 web  1 books ", "data.path"), (Parts{{2.0, "web"}, {1.0, "books"}}));
  for (const char* bad : {"0.7 a.bin 0.3", "0.7 a.bin b.bin 0.3", "0.7 a.bin -1 b.bin", "0.5 a 0 b"}) {
    try {
      data::parse_blend(bad, "data.path");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("data.path"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tidal
