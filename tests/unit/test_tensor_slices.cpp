// Slices of a global tensor (core/tensor_slices.h): overlaps copied between random boxes equal
// an element-by-element reference, and a tensor-parallel block's pieces (nn/tp/shard.h) place
// exactly the elements shard_of takes, fused segments and padded rows included.
#include "core/tensor_slices.h"
#include "nn/tp/shard.h"

#include <gtest/gtest.h>

#include <random>

namespace tidal {
namespace {

// A random box inside `full`.
Slice random_box(const Shape& full, std::mt19937& rng) {
  Slice s{full, full};
  for (int d = 0; d < full.size(); ++d) {
    std::uniform_int_distribution<std::int64_t> at(0, full[d] - 1);
    const std::int64_t a = at(rng), b = at(rng);
    s.start[d] = std::min(a, b);
    s.extent[d] = std::max(a, b) - s.start[d] + 1;
  }
  return s;
}

// The global value at each index of a box: its row-major index in the full tensor.
std::vector<float> values_of(const Slice& box, const Shape& full) {
  std::vector<float> out(std::size_t(box.numel()));
  Shape at = box.start;
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::int64_t g = 0;
    for (int d = 0; d < full.size(); ++d) g = g * full[d] + at[d];
    out[i] = float(g);
    for (int d = full.size() - 1; d >= 0; --d) {
      if (++at[d] < box.start[d] + box.extent[d]) break;
      at[d] = box.start[d];
    }
  }
  return out;
}

TEST(TensorSlices, OverlapsOfRandomBoxesMatchTheReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    Shape full;
    const int nd = 1 + trial % 4;
    for (int d = 0; d < nd; ++d) full.push_back(1 + std::int64_t(rng() % 9));
    const Slice from = random_box(full, rng), to = random_box(full, rng);
    const std::vector<float> src = values_of(from, full);
    std::vector<float> dst(std::size_t(to.numel()), -1.0f);
    const std::int64_t n = copy_overlap(src.data(), from, dst.data(), to, sizeof(float));
    EXPECT_EQ(n, overlap_elements(from, to));
    // Every element of `to` holds its global index where `from` covers it, else is untouched.
    const std::vector<float> want = values_of(to, full);
    std::int64_t copied = 0;
    Shape at = to.start;
    for (std::size_t i = 0; i < dst.size(); ++i) {
      bool inside = true;
      for (int d = 0; d < nd; ++d) inside = inside && at[d] >= from.start[d] && at[d] < from.start[d] + from.extent[d];
      ASSERT_EQ(dst[i], inside ? want[i] : -1.0f) << "trial " << trial << " element " << i;
      copied += inside;
      for (int d = nd - 1; d >= 0; --d) {
        if (++at[d] < to.start[d] + to.extent[d]) break;
        at[d] = to.start[d];
      }
    }
    ASSERT_EQ(copied, n);
  }
}

nn::Parameter block(const char* name, Shape shape, Shape full, Shape offset, int segments = 1) {
  nn::Parameter p;
  p.name = name;
  p.shape = shape;
  p.full_shape = full;
  p.offset = offset;
  p.segments = segments;
  return p;
}

// A block of a fused weight (3 segments, q | k | v) and of a vocabulary split past its end.
TEST(TensorSlices, ParameterPiecesPlaceWhatShardOfTakes) {
  const Shape full{12, 5};
  Tensor whole = Tensor::empty(full);
  for (std::int64_t i = 0; i < whole.numel(); ++i) whole.data<float>()[i] = float(i);
  const std::vector<nn::Parameter> blocks = {
      block("qkv", {6, 5}, full, {2, 0}, 3),  // rows 2-3 of each third
      block("vocab", {5, 5}, full, {10, 0}),  // rows 10, 11 and padding
      block("cols", {12, 2}, full, {0, 3}),
      block("pad", {5, 5}, full, {15, 0}),    // wholly padding
  };
  for (const nn::Parameter& p : blocks) {
    const Tensor want = nn::tp::shard_of(p, whole);
    Tensor got = Tensor::zeros(p.shape);
    const std::vector<Piece> pieces = nn::tp::pieces_of(p);
    const std::vector<Piece> all{{.row = 0, .slice = {Shape{0, 0}, full}}};
    const std::int64_t n = copy_overlap(whole.raw(), all, got.raw(), pieces, sizeof(float));
    EXPECT_EQ(n, block_elements(pieces)) << p.name;
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << p.name;
  }
  EXPECT_TRUE(nn::tp::pieces_of(blocks[3]).empty());
  EXPECT_EQ(block_elements(nn::tp::pieces_of(blocks[1])), 2 * 5);
}

}  // namespace
}  // namespace tidal
