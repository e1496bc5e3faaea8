// Datasets: the Markov language's entropy floor against an empirical estimate, determinism by
// sample index, and token files (llm.c format) with a per-epoch order that visits every window
// exactly once.
#include "data/images.h"
#include "data/markov.h"
#include "data/stream_dataset.h"
#include "data/token_shards.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace tidal {
namespace {

TEST(MarkovData, EntropyFloorMatchesTheEmpiricalConditionalEntropy) {
  const std::int64_t V = 32, T = 64;
  data::MarkovDataset d(V, 4, T, V, data::Objective::causal, 5);
  std::map<std::pair<int, int>, double> pair_counts;
  std::map<int, double> counts;
  double n = 0;
  for (std::int64_t i = 0; i < 4000; ++i) {
    const auto s = d.sequence(i, data::Split::train);
    for (std::int64_t t = 0; t < T; ++t) {
      pair_counts[{s[std::size_t(t)], s[std::size_t(t + 1)]}] += 1;
      counts[s[std::size_t(t)]] += 1;
      n += 1;
    }
  }
  double h = 0;  // plug-in estimate of H(next | current)
  for (auto& [pair, c] : pair_counts) h -= c / n * std::log(c / counts[pair.first]);
  // 256k transitions: the plug-in estimate is within about 0.01 nats.
  EXPECT_NEAR(h, *d.entropy_floor(), 0.02);
  EXPECT_GT(*d.entropy_floor(), 0.3);
  EXPECT_LT(*d.entropy_floor(), std::log(4.0));
}

TEST(MarkovData, OneSuccessorHasAZeroFloorAndSamplesAreAFunctionOfTheirIndex) {
  data::MarkovDataset det(16, 1, 8, 16, data::Objective::causal, 2);
  EXPECT_NEAR(*det.entropy_floor(), 0.0, 1e-12);
  data::MarkovDataset d(64, 4, 16, 64, data::Objective::causal, 3);
  EXPECT_EQ(d.sequence(12345, data::Split::train), d.sequence(12345, data::Split::train));
  EXPECT_NE(d.sequence(12345, data::Split::train), d.sequence(12345, data::Split::eval));
  EXPECT_NE(d.sequence(12345, data::Split::train), d.sequence(12346, data::Split::train));
  const nn::Batch b = d.batch(7, 3, data::Split::train);
  const auto s8 = d.sequence(8, data::Split::train);
  for (int t = 0; t < 16; ++t) {
    EXPECT_EQ(b.tokens.data<std::int32_t>()[16 + t], s8[std::size_t(t)]);
    EXPECT_EQ(b.targets.data<std::int32_t>()[16 + t], s8[std::size_t(t + 1)]);
  }
}

TEST(MarkovData, MaskedObjectivePredictsAboutFifteenPercent) {
  data::MarkovDataset d(63, 4, 64, 64, data::Objective::masked, 3);
  const nn::Batch b = d.batch(0, 64, data::Split::train);
  std::int64_t predicted = 0, masked = 0;
  for (std::int64_t i = 0; i < b.targets.numel(); ++i) {
    const std::int32_t target = b.targets.data<std::int32_t>()[i], token = b.tokens.data<std::int32_t>()[i];
    if (target == -100) continue;
    ++predicted;
    masked += token == 63;
  }
  EXPECT_NEAR(double(predicted) / double(b.targets.numel()), 0.15, 0.02);
  EXPECT_NEAR(double(masked) / double(predicted), 0.8, 0.05);
}

std::unique_ptr<data::StreamDataset> shards(const std::string& spec, std::int64_t T, std::int64_t vocab) {
  return std::make_unique<data::StreamDataset>(std::make_unique<data::TokenShards>(spec, "data.path"), true, T, vocab,
                                               data::Objective::causal, 4, "data.path");
}

TEST(TokenFile, EveryWindowOncePerEpochAndEvalHeldOut) {
  const std::string path = (std::filesystem::temp_directory_path() / ("tokens-" + std::to_string(::getpid()))).string();
  const std::int64_t T = 9, windows = 101;
  for (bool wide : {false, true}) {
    std::vector<std::uint32_t> tokens;
    for (std::int64_t w = 0; w < windows; ++w)
      for (std::int64_t t = 0; t <= T; ++t) tokens.push_back(std::uint32_t(w % 50 + (wide ? 70000 : 0)));
    data::write_token_file(path, tokens, wide);
    const auto d = shards(path, T, wide ? 70050 : 50);
    // 101 windows: 5 held out for eval, 96 for training.
    std::multiset<std::int64_t> seen;
    for (std::int64_t i = 0; i < 96; ++i) seen.insert(d->sequence(i, data::Split::train)[0]);
    std::multiset<std::int64_t> expected;
    for (std::int64_t w = 0; w < 96; ++w) expected.insert(w % 50 + (wide ? 70000 : 0));
    EXPECT_EQ(seen, expected);
    EXPECT_NE(d->sequence(0, data::Split::train), d->sequence(96, data::Split::train)) << "epochs share one order";
    EXPECT_EQ(d->sequence(0, data::Split::eval)[0], 96 % 50 + (wide ? 70000 : 0));
  }
  // Ids beyond the vocabulary: an error naming data.path when a window holding one is read.
  const auto small = shards(path, T, 100);
  try {
    for (std::int64_t i = 0; i < 96; ++i) small->sequence(i, data::Split::train);
    ADD_FAILURE() << "ids of 70000 and more read with a vocabulary of 100";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.vocab_size"), std::string::npos) << e.what();
  }
  // A header whose count the file does not hold (negative, or billions: found by fuzz_token_file)
  // is an error before anything is allocated for it.
  for (const std::int32_t count : {-1, 2000000000}) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write(reinterpret_cast<const char*>(&count), 4);
    f.close();
    try {
      shards(path, T, 100000);
      ADD_FAILURE() << "a header promising " << count << " tokens loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the file is truncated or not a token file"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
}

// A directory and a glob of shards read as one stream, in name order, windows across their edges.
TEST(TokenFile, ShardsAreOneStream) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("shards-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::uint32_t> all;
  for (int k = 0; k < 3; ++k) {  // shards of 7, 8 and 9 tokens: 0, 1, 2, ... across them
    std::vector<std::uint32_t> part;
    for (int i = 0; i < 7 + k; ++i) part.push_back(std::uint32_t(all.size() + part.size()));
    data::write_token_file((dir / fmt::format("train_{:02d}.bin", k)).string(), part, k == 1);
    all.insert(all.end(), part.begin(), part.end());
  }
  std::ofstream(dir / "notes.txt") << "not a shard";
  for (const std::string& spec : {dir.string(), (dir / "train_*.bin").string()}) {
    data::TokenShards s(spec, "data.path");
    EXPECT_EQ(s.shards(), 3u);
    EXPECT_EQ(s.tokens(), 24);
    EXPECT_TRUE(s.wide());
    std::vector<std::int32_t> got(24);
    s.read(0, 24, got.data());
    EXPECT_EQ(std::vector<std::int32_t>(all.begin(), all.end()), got);
    s.read(5, 11, got.data());  // from the first shard, across the second, into the third
    EXPECT_EQ(got[0], 5);
    EXPECT_EQ(got[10], 15);
  }
  EXPECT_THROW(data::TokenShards((dir / "valid_*.bin").string(), "data.path"), Error);
  std::filesystem::remove_all(dir);
}

TEST(ImageFile, PixelsScaleToUnitRangeAndEvalIsHeldOut) {
  const std::string path = (std::filesystem::temp_directory_path() / ("images-" + std::to_string(::getpid()))).string();
  const data::ImageShape shape{1, 2, 2, 3};
  std::vector<std::uint32_t> labels;
  std::vector<std::uint8_t> pixels;
  for (std::uint32_t i = 0; i < 40; ++i) {
    labels.push_back(i % 3);
    for (int p = 0; p < 4; ++p) pixels.push_back(std::uint8_t(i * 6 + std::uint32_t(p)));
  }
  data::write_image_file(path, shape, labels, pixels);
  data::ImageDataset d(path, shape, 1);
  // 40 images: the last 2 are the eval split.
  const nn::Batch eval = d.batch(0, 2, data::Split::eval);
  EXPECT_EQ(eval.targets.data<std::int32_t>()[0], 38 % 3);
  EXPECT_FLOAT_EQ(eval.images.data<float>()[1], float(38 * 6 + 1) / 127.5f - 1.0f);
  // One training epoch (38 samples) visits each training image once.
  std::multiset<float> firsts;
  const nn::Batch train = d.batch(0, 38, data::Split::train);
  for (int i = 0; i < 38; ++i) firsts.insert(train.images.data<float>()[i * 4]);
  std::multiset<float> expected;
  for (int i = 0; i < 38; ++i) expected.insert(float(i * 6) / 127.5f - 1.0f);
  EXPECT_EQ(firsts, expected);
  EXPECT_THROW(data::ImageDataset(path, {3, 2, 2, 3}, 1), Error);  // shape differs from the model's
  // A count of 788 million images in a 60-byte file (found by fuzz_images): an error, not an
  // allocation of gigabytes.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const std::uint32_t count = 0x2f000004u;
    f.seekp(8);
    f.write(reinterpret_cast<const char*>(&count), 4);
  }
  try {
    data::ImageDataset(path, shape, 1);
    ADD_FAILURE() << "a header promising 788 million images loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("promises 788529156 images"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(SyntheticImages, LabelsCoverTheClassesAndSamplesAreDeterministic) {
  data::ImageDataset d({3, 8, 8, 5}, 2);
  const nn::Batch a = d.batch(10, 50, data::Split::train), b = d.batch(10, 50, data::Split::train);
  EXPECT_EQ(std::memcmp(a.images.raw(), b.images.raw(), a.images.nbytes()), 0);
  std::set<std::int32_t> classes(a.targets.data<std::int32_t>(), a.targets.data<std::int32_t>() + 50);
  EXPECT_EQ(classes.size(), 5u);
}

}  // namespace
}  // namespace tidal
