// Parallel layout: every communication group of every tensor mode at 4, 8, 9 and more ranks
// against tables written out by hand (the tables are the specification, so none is computed
// here), the bunched 2d arrangement of optimus-2d Fig. 8(b), coordinates, neighbours, rng
// seeds, and each validation error.
#include "parallel/layout.h"

#include "config/config.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <set>

namespace tidal::parallel {

// Readable failures for Coordinates (found by argument-dependent lookup, so outside the
// anonymous namespace).
void PrintTo(const Coordinates& c, std::ostream* os) {
  *os << "{data " << c.data << ", pipeline " << c.pipeline << ", sequence " << c.sequence << ", tensor " << c.tensor
      << ", (" << c.row << ", " << c.col << ", " << c.depth << ")}";
}

namespace {

using Table = std::vector<std::vector<int>>;
using Tables = std::map<GroupKind, Table>;

// Compares every kind's groups with `tables`; a kind the case does not list must be one group
// per rank. Also checks group(kind, r) and group_index for every rank, and the round trip.
// Without a sequence split, data_sequence is the data group, without expert parallelism
// expert_data is data_sequence, and with two stages pipeline_ends is the pipeline group (so cases
// list them only otherwise).
void expect_groups(const MeshSpec& spec, Tables tables) {
  if (spec.sequence == 1 && tables.count(GroupKind::data)) tables[GroupKind::data_sequence] = tables[GroupKind::data];
  // Without expert parallelism every data (and sequence) rank holds the same experts.
  if (spec.expert == 1 && tables.count(GroupKind::data_sequence))
    tables[GroupKind::expert_data] = tables[GroupKind::data_sequence];
  if (spec.pipeline == 2) tables[GroupKind::pipeline_ends] = tables.at(GroupKind::pipeline);
  const Layout layout(spec);
  const int world = layout.world_size();
  for (GroupKind kind : kAllGroupKinds) {
    SCOPED_TRACE(std::string("kind ") + std::string(group_name(kind)));
    const auto it = tables.find(kind);
    if (it == tables.end()) {
      EXPECT_EQ(layout.groups(kind).size(), std::size_t(world));
      for (int r = 0; r < world; ++r) EXPECT_EQ(layout.group(kind, r), std::vector<int>{r}) << "rank " << r;
      continue;
    }
    const Table& table = it->second;
    EXPECT_EQ(layout.groups(kind), table);
    std::multiset<int> covered;  // the hand-written table itself must be a partition
    for (const std::vector<int>& g : table) {
      for (std::size_t i = 0; i < g.size(); ++i) {
        const int r = g[i];
        covered.insert(r);
        EXPECT_EQ(layout.group(kind, r), g) << "rank " << r;
        EXPECT_EQ(layout.group_index(kind, r), int(i)) << "rank " << r;
      }
    }
    ASSERT_EQ(covered.size(), std::size_t(world));
    for (int r = 0; r < world; ++r) EXPECT_EQ(covered.count(r), 1u) << "table misses or repeats rank " << r;
  }
  for (int r = 0; r < world; ++r) EXPECT_EQ(layout.rank_of(layout.coordinates(r)), r);
}

// Coordinates in field order: data, pipeline, sequence, tensor, row, col, depth.
void expect_coordinates(const MeshSpec& spec, const std::vector<Coordinates>& by_rank) {
  const Layout layout(spec);
  ASSERT_EQ(by_rank.size(), std::size_t(layout.world_size()));
  for (int r = 0; r < layout.world_size(); ++r) {
    EXPECT_EQ(layout.coordinates(r), by_rank[r]) << "rank " << r;
    EXPECT_EQ(layout.rank_of(by_rank[r]), r);
  }
}

std::string error_of(const MeshSpec& spec) {
  try {
    (void)Layout(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Passes when `message` contains every one of `parts`.
void expect_mentions(const std::string& message, std::initializer_list<const char*> parts) {
  for (const char* part : parts) EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

std::string fit_error(const MeshSpec& spec, int n_layer, int n_head, std::int64_t n_embd, std::int64_t seq_len) {
  try {
    check_model_fits(Layout(spec), n_layer, n_head, n_embd, seq_len);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

constexpr TensorMode k1d = TensorMode::d1, k2d = TensorMode::d2, k2p5d = TensorMode::d2p5, k3d = TensorMode::d3;

// Expert parallelism carved from the data ranks: expert groups of consecutive data coordinates,
// expert_data the data coordinates equal modulo parallel.expert with every sequence position.
TEST(ParallelLayout, ExpertGroups) {
  const Table all4 = {{0, 1, 2, 3}}, all8 = {{0, 1, 2, 3, 4, 5, 6, 7}};
  expect_groups({.world_size = 4, .data = 4, .expert = 2},
                {{GroupKind::world, all4}, {GroupKind::data, all4}, {GroupKind::expert, {{0, 1}, {2, 3}}},
                 {GroupKind::expert_data, {{0, 2}, {1, 3}}}});
  // rank = s + 2 d with 4 data and 2 sequence coordinates.
  expect_groups({.world_size = 8, .data = 4, .sequence = 2, .expert = 2},
                {{GroupKind::world, all8},
                 {GroupKind::data, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
                 {GroupKind::sequence, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                 {GroupKind::model, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                 {GroupKind::data_sequence, all8},
                 {GroupKind::expert, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
                 {GroupKind::expert_data, {{0, 1, 4, 5}, {2, 3, 6, 7}}}});
  EXPECT_THROW(Layout({.world_size = 2, .data = 2, .expert = 4}), Error);
}

TEST(ParallelLayout, FourRanks) {
  const Table all = {{0, 1, 2, 3}};
  {
    SCOPED_TRACE("data=4");
    expect_groups({.world_size = 4, .data = 4}, {{GroupKind::world, all}, {GroupKind::data, all}});
  }
  {
    SCOPED_TRACE("pipeline=4");
    expect_groups({.world_size = 4, .pipeline = 4},
                  {{GroupKind::world, all},
                   {GroupKind::pipeline, all},
                   {GroupKind::model, all},
                   {GroupKind::pipeline_ends, {{0, 3}, {1}, {2}}}});
  }
  {
    SCOPED_TRACE("1d tensor=4");
    expect_groups({.world_size = 4, .tensor = 4, .mode = k1d},
                  {{GroupKind::world, all}, {GroupKind::tensor, all}, {GroupKind::model, all}});
  }
  {
    SCOPED_TRACE("data=2 x 1d tensor=2");
    expect_groups({.world_size = 4, .data = 2, .tensor = 2},
                  {{GroupKind::world, all},
                   {GroupKind::tensor, {{0, 1}, {2, 3}}},
                   {GroupKind::data, {{0, 2}, {1, 3}}},
                   {GroupKind::model, {{0, 1}, {2, 3}}}});
  }
  {
    SCOPED_TRACE("sequence=4");
    expect_groups({.world_size = 4, .sequence = 4},
                  {{GroupKind::world, all},
                   {GroupKind::sequence, all},
                   {GroupKind::model, all},
                   {GroupKind::data_sequence, all}});
  }
  {
    SCOPED_TRACE("2d q=2");
    expect_groups({.world_size = 4, .tensor = 4, .mode = k2d},
                  {{GroupKind::world, all},
                   {GroupKind::tensor, all},
                   {GroupKind::model, all},
                   {GroupKind::tensor_row, {{0, 1}, {2, 3}}},
                   {GroupKind::tensor_col, {{0, 2}, {1, 3}}}});
  }
  {
    SCOPED_TRACE("2.5d q=2 depth=1 (one layer: the 2d grid)");
    expect_groups({.world_size = 4, .tensor = 4, .mode = k2p5d, .depth = 1},
                  {{GroupKind::world, all},
                   {GroupKind::tensor, all},
                   {GroupKind::model, all},
                   {GroupKind::tensor_row, {{0, 1}, {2, 3}}},
                   {GroupKind::tensor_col, {{0, 2}, {1, 3}}}});
  }
  {
    SCOPED_TRACE("2.5d q=1 depth=4 (only depth)");
    expect_groups({.world_size = 4, .tensor = 4, .mode = k2p5d, .depth = 4},
                  {{GroupKind::world, all},
                   {GroupKind::tensor, all},
                   {GroupKind::model, all},
                   {GroupKind::tensor_depth, all}});
  }
  {
    SCOPED_TRACE("data=2 x pipeline=2");
    expect_groups({.world_size = 4, .data = 2, .pipeline = 2},
                  {{GroupKind::world, all},
                   {GroupKind::data, {{0, 1}, {2, 3}}},
                   {GroupKind::pipeline, {{0, 2}, {1, 3}}},
                   {GroupKind::model, {{0, 2}, {1, 3}}}});
  }
}

TEST(ParallelLayout, EightRanks) {
  const Table all = {{0, 1, 2, 3, 4, 5, 6, 7}};
  {
    SCOPED_TRACE("data=2 x pipeline=2 x 1d tensor=2");
    expect_groups({.world_size = 8, .data = 2, .pipeline = 2, .tensor = 2},
                  {{GroupKind::world, all},
                   {GroupKind::tensor, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                   {GroupKind::data, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
                   {GroupKind::pipeline, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                   {GroupKind::model, {{0, 1, 4, 5}, {2, 3, 6, 7}}}});
  }
  {
    SCOPED_TRACE("data=2 x 2d q=2");
    expect_groups({.world_size = 8, .data = 2, .tensor = 4, .mode = k2d},
                  {{GroupKind::world, all},
                   {GroupKind::tensor, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                   {GroupKind::model, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                   {GroupKind::data, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                   {GroupKind::tensor_row, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                   {GroupKind::tensor_col, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}}});
  }
  {
    SCOPED_TRACE("2.5d q=2 depth=2");
    expect_groups({.world_size = 8, .tensor = 8, .mode = k2p5d, .depth = 2},
                  {{GroupKind::world, all},
                   {GroupKind::tensor, all},
                   {GroupKind::model, all},
                   {GroupKind::tensor_row, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                   {GroupKind::tensor_col, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
                   {GroupKind::tensor_depth, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}}});
  }
  {
    SCOPED_TRACE("3d l=2");
    expect_groups({.world_size = 8, .tensor = 8, .mode = k3d},
                  {{GroupKind::world, all},
                   {GroupKind::tensor, all},
                   {GroupKind::model, all},
                   {GroupKind::tensor_x, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                   {GroupKind::tensor_y, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
                   {GroupKind::tensor_z, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}}});
  }
  {
    SCOPED_TRACE("data=2 x sequence=4");
    expect_groups({.world_size = 8, .data = 2, .sequence = 4},
                  {{GroupKind::world, all},
                   {GroupKind::sequence, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                   {GroupKind::data, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                   {GroupKind::model, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                   {GroupKind::data_sequence, all}});
  }
  {
    SCOPED_TRACE("data=2 x pipeline=2 x sequence=2");
    expect_groups({.world_size = 8, .data = 2, .pipeline = 2, .sequence = 2},
                  {{GroupKind::world, all},
                   {GroupKind::sequence, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                   {GroupKind::data, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
                   {GroupKind::pipeline, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                   {GroupKind::model, {{0, 1, 4, 5}, {2, 3, 6, 7}}},
                   {GroupKind::data_sequence, {{0, 1, 2, 3}, {4, 5, 6, 7}}}});
  }
  {
    SCOPED_TRACE("pipeline=2 x sequence=4");
    expect_groups({.world_size = 8, .pipeline = 2, .sequence = 4},
                  {{GroupKind::world, all},
                   {GroupKind::sequence, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                   {GroupKind::pipeline, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                   {GroupKind::model, all},
                   {GroupKind::data_sequence, {{0, 1, 2, 3}, {4, 5, 6, 7}}}});
  }
  {
    SCOPED_TRACE("data=2 x pipeline=4");
    expect_groups({.world_size = 8, .data = 2, .pipeline = 4},
                  {{GroupKind::world, all},
                   {GroupKind::data, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                   {GroupKind::pipeline, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
                   {GroupKind::model, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
                   {GroupKind::pipeline_ends, {{0, 6}, {1, 7}, {2}, {3}, {4}, {5}}}});
  }
}

TEST(ParallelLayout, NineRanks2d) {
  const Table all = {{0, 1, 2, 3, 4, 5, 6, 7, 8}};
  const Tables q3 = {{GroupKind::world, all},
                     {GroupKind::tensor, all},
                     {GroupKind::model, all},
                     {GroupKind::tensor_row, {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}},
                     {GroupKind::tensor_col, {{0, 3, 6}, {1, 4, 7}, {2, 5, 8}}}};
  expect_groups({.world_size = 9, .tensor = 9, .mode = k2d}, q3);
  // A 3-rank node can only hold a 1 x 3 block, a whole row: the natural order again; a node
  // holding the whole grid needs no bunching.
  expect_groups({.world_size = 9, .tensor = 9, .mode = k2d, .ranks_per_node = 3}, q3);
  expect_groups({.world_size = 9, .tensor = 9, .mode = k2d, .ranks_per_node = 9}, q3);
}

TEST(ParallelLayout, SixteenRanks2dBunchedLikeOptimusFig8) {
  const Table all = {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};
  // Fig. 8(b): 4 nodes of 4 GPUs, each node a 2 x 2 block. The grid, by tensor rank:
  //    0  1 |  4  5
  //    2  3 |  6  7
  //   ------+------
  //    8  9 | 12 13
  //   10 11 | 14 15
  expect_groups({.world_size = 16, .tensor = 16, .mode = k2d, .ranks_per_node = 4},
                {{GroupKind::world, all},
                 {GroupKind::tensor, all},
                 {GroupKind::model, all},
                 {GroupKind::tensor_row, {{0, 1, 4, 5}, {2, 3, 6, 7}, {8, 9, 12, 13}, {10, 11, 14, 15}}},
                 {GroupKind::tensor_col, {{0, 2, 8, 10}, {1, 3, 9, 11}, {4, 6, 12, 14}, {5, 7, 13, 15}}}});
  std::vector<Coordinates> by_rank = {
      {0, 0, 0, 0, 0, 0, 0},  {0, 0, 0, 1, 0, 1, 0},  {0, 0, 0, 2, 1, 0, 0},  {0, 0, 0, 3, 1, 1, 0},
      {0, 0, 0, 4, 0, 2, 0},  {0, 0, 0, 5, 0, 3, 0},  {0, 0, 0, 6, 1, 2, 0},  {0, 0, 0, 7, 1, 3, 0},
      {0, 0, 0, 8, 2, 0, 0},  {0, 0, 0, 9, 2, 1, 0},  {0, 0, 0, 10, 3, 0, 0}, {0, 0, 0, 11, 3, 1, 0},
      {0, 0, 0, 12, 2, 2, 0}, {0, 0, 0, 13, 2, 3, 0}, {0, 0, 0, 14, 3, 2, 0}, {0, 0, 0, 15, 3, 3, 0},
  };
  expect_coordinates({.world_size = 16, .tensor = 16, .mode = k2d, .ranks_per_node = 4}, by_rank);

  // The point of the arrangement: every row and every column spans two nodes, not four.
  const Layout bunched({.world_size = 16, .tensor = 16, .mode = k2d, .ranks_per_node = 4});
  for (GroupKind kind : {GroupKind::tensor_row, GroupKind::tensor_col})
    for (const std::vector<int>& g : bunched.groups(kind)) {
      std::set<int> nodes;
      for (int r : g) nodes.insert(r / 4);
      EXPECT_EQ(nodes.size(), 2u) << group_name(kind) << " group starting at " << g[0];
    }

  // Unknown node size, or node sizes that tile no better block, keep the natural row-major grid.
  const Tables natural = {
      {GroupKind::world, all},
      {GroupKind::tensor, all},
      {GroupKind::model, all},
      {GroupKind::tensor_row, {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}},
      {GroupKind::tensor_col, {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}}};
  for (int per_node : {0, 1, 2, 3, 6, 8, 16, 32}) {
    SCOPED_TRACE("ranks_per_node " + std::to_string(per_node));
    expect_groups({.world_size = 16, .tensor = 16, .mode = k2d, .ranks_per_node = per_node}, natural);
  }
}

TEST(ParallelLayout, ThirtySixRanks2dBunchedInTwoByThreeBlocks) {
  // q = 6, 6 ranks per node: the squarest block with a*b = 6, a | 6, b | 6 is 2 x 3.
  //    0  1  2 |  6  7  8
  //    3  4  5 |  9 10 11
  //   12 13 14 | 18 19 20
  //   15 16 17 | 21 22 23
  //   24 25 26 | 30 31 32
  //   27 28 29 | 33 34 35
  const Table all = {{0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17,
                      18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35}};
  expect_groups({.world_size = 36, .tensor = 36, .mode = k2d, .ranks_per_node = 6},
                {{GroupKind::world, all},
                 {GroupKind::tensor, all},
                 {GroupKind::model, all},
                 {GroupKind::tensor_row,
                  {{0, 1, 2, 6, 7, 8},
                   {3, 4, 5, 9, 10, 11},
                   {12, 13, 14, 18, 19, 20},
                   {15, 16, 17, 21, 22, 23},
                   {24, 25, 26, 30, 31, 32},
                   {27, 28, 29, 33, 34, 35}}},
                 {GroupKind::tensor_col,
                  {{0, 3, 12, 15, 24, 27},
                   {1, 4, 13, 16, 25, 28},
                   {2, 5, 14, 17, 26, 29},
                   {6, 9, 18, 21, 30, 33},
                   {7, 10, 19, 22, 31, 34},
                   {8, 11, 20, 23, 32, 35}}}});
}

TEST(ParallelLayout, ThirtyTwoRanks2p5dBunchedPerLayer) {
  // q = 4, depth 2, 4 ranks per node: each 16-rank layer is bunched as in Fig. 8(b).
  const Table all = {{0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                      16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31}};
  expect_groups({.world_size = 32, .tensor = 32, .mode = k2p5d, .depth = 2, .ranks_per_node = 4},
                {{GroupKind::world, all},
                 {GroupKind::tensor, all},
                 {GroupKind::model, all},
                 {GroupKind::tensor_row,
                  {{0, 1, 4, 5},
                   {2, 3, 6, 7},
                   {8, 9, 12, 13},
                   {10, 11, 14, 15},
                   {16, 17, 20, 21},
                   {18, 19, 22, 23},
                   {24, 25, 28, 29},
                   {26, 27, 30, 31}}},
                 {GroupKind::tensor_col,
                  {{0, 2, 8, 10},
                   {1, 3, 9, 11},
                   {4, 6, 12, 14},
                   {5, 7, 13, 15},
                   {16, 18, 24, 26},
                   {17, 19, 25, 27},
                   {20, 22, 28, 30},
                   {21, 23, 29, 31}}},
                 {GroupKind::tensor_depth,
                  {{0, 16},
                   {1, 17},
                   {2, 18},
                   {3, 19},
                   {4, 20},
                   {5, 21},
                   {6, 22},
                   {7, 23},
                   {8, 24},
                   {9, 25},
                   {10, 26},
                   {11, 27},
                   {12, 28},
                   {13, 29},
                   {14, 30},
                   {15, 31}}}});
}

TEST(ParallelLayout, SixteenRanksData2x3d) {
  const Table all = {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};
  const Table replicas = {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}};
  expect_groups({.world_size = 16, .data = 2, .tensor = 8, .mode = k3d},
                {{GroupKind::world, all},
                 {GroupKind::tensor, replicas},
                 {GroupKind::model, replicas},
                 {GroupKind::data, {{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}},
                 {GroupKind::tensor_x, {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}},
                 {GroupKind::tensor_y, {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}},
                 {GroupKind::tensor_z, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}}});
}

TEST(ParallelLayout, Coordinates) {
  // Fields: data, pipeline, sequence, tensor, row, col, depth.
  expect_coordinates({.world_size = 8, .data = 2, .pipeline = 2, .tensor = 2},
                     {{0, 0, 0, 0, 0, 0, 0},
                      {0, 0, 0, 1, 0, 0, 0},
                      {1, 0, 0, 0, 0, 0, 0},
                      {1, 0, 0, 1, 0, 0, 0},
                      {0, 1, 0, 0, 0, 0, 0},
                      {0, 1, 0, 1, 0, 0, 0},
                      {1, 1, 0, 0, 0, 0, 0},
                      {1, 1, 0, 1, 0, 0, 0}});
  expect_coordinates({.world_size = 8, .tensor = 8, .mode = k2p5d, .depth = 2},
                     {{0, 0, 0, 0, 0, 0, 0},
                      {0, 0, 0, 1, 0, 1, 0},
                      {0, 0, 0, 2, 1, 0, 0},
                      {0, 0, 0, 3, 1, 1, 0},
                      {0, 0, 0, 4, 0, 0, 1},
                      {0, 0, 0, 5, 0, 1, 1},
                      {0, 0, 0, 6, 1, 0, 1},
                      {0, 0, 0, 7, 1, 1, 1}});
  expect_coordinates({.world_size = 8, .tensor = 8, .mode = k3d},  // (x, y, z) in (row, col, depth)
                     {{0, 0, 0, 0, 0, 0, 0},
                      {0, 0, 0, 1, 0, 0, 1},
                      {0, 0, 0, 2, 0, 1, 0},
                      {0, 0, 0, 3, 0, 1, 1},
                      {0, 0, 0, 4, 1, 0, 0},
                      {0, 0, 0, 5, 1, 0, 1},
                      {0, 0, 0, 6, 1, 1, 0},
                      {0, 0, 0, 7, 1, 1, 1}});
  expect_coordinates({.world_size = 8, .pipeline = 2, .sequence = 4},
                     {{0, 0, 0, 0, 0, 0, 0},
                      {0, 0, 1, 0, 0, 0, 0},
                      {0, 0, 2, 0, 0, 0, 0},
                      {0, 0, 3, 0, 0, 0, 0},
                      {0, 1, 0, 0, 0, 0, 0},
                      {0, 1, 1, 0, 0, 0, 0},
                      {0, 1, 2, 0, 0, 0, 0},
                      {0, 1, 3, 0, 0, 0, 0}});

  // In a grid mode the grid position names the rank; `tensor` is not read.
  const Layout grid({.world_size = 8, .data = 2, .tensor = 4, .mode = k2d});
  EXPECT_EQ(grid.rank_of({.data = 1, .tensor = 0, .row = 1, .col = 0}), 6);
  EXPECT_EQ(grid.tensor_side(), 2);
  EXPECT_THROW(grid.coordinates(8), InternalError);
  EXPECT_THROW(grid.rank_of({.row = 2}), InternalError);
  EXPECT_THROW(grid.group(GroupKind::data, -1), InternalError);
}

TEST(ParallelLayout, PipelineNeighbours) {
  struct Case {
    MeshSpec spec;
    std::vector<int> prev, next;
  };
  const Case cases[] = {
      {{.world_size = 4, .pipeline = 4}, {-1, 0, 1, 2}, {1, 2, 3, -1}},
      {{.world_size = 4, .data = 2, .pipeline = 2}, {-1, -1, 0, 1}, {2, 3, -1, -1}},
      {{.world_size = 8, .data = 2, .pipeline = 2, .tensor = 2}, {-1, -1, -1, -1, 0, 1, 2, 3}, {4, 5, 6, 7, -1, -1, -1, -1}},
      {{.world_size = 8, .data = 2, .pipeline = 4}, {-1, -1, 0, 1, 2, 3, 4, 5}, {2, 3, 4, 5, 6, 7, -1, -1}},
      {{.world_size = 4, .data = 4}, {-1, -1, -1, -1}, {-1, -1, -1, -1}},
  };
  for (const Case& c : cases) {
    const Layout layout(c.spec);
    for (int r = 0; r < layout.world_size(); ++r) {
      EXPECT_EQ(layout.pipeline_prev(r), c.prev[r]) << "world " << layout.world_size() << " rank " << r;
      EXPECT_EQ(layout.pipeline_next(r), c.next[r]) << "world " << layout.world_size() << " rank " << r;
    }
  }
}

TEST(ParallelLayout, SequenceRingNeighbours) {
  struct Case {
    MeshSpec spec;
    std::vector<int> prev, next;
  };
  const Case cases[] = {
      {{.world_size = 4, .sequence = 4}, {3, 0, 1, 2}, {1, 2, 3, 0}},
      {{.world_size = 8, .data = 2, .sequence = 4}, {3, 0, 1, 2, 7, 4, 5, 6}, {1, 2, 3, 0, 5, 6, 7, 4}},
      {{.world_size = 8, .pipeline = 2, .sequence = 4}, {3, 0, 1, 2, 7, 4, 5, 6}, {1, 2, 3, 0, 5, 6, 7, 4}},
      {{.world_size = 4, .data = 2, .sequence = 2}, {1, 0, 3, 2}, {1, 0, 3, 2}},
      {{.world_size = 2, .tensor = 2}, {0, 1}, {0, 1}},  // a ring of one is its own neighbour
  };
  for (const Case& c : cases) {
    const Layout layout(c.spec);
    for (int r = 0; r < layout.world_size(); ++r) {
      EXPECT_EQ(layout.sequence_prev(r), c.prev[r]) << "world " << layout.world_size() << " rank " << r;
      EXPECT_EQ(layout.sequence_next(r), c.next[r]) << "world " << layout.world_size() << " rank " << r;
    }
  }
}

TEST(ParallelLayout, RngSeedsAgreeWhereReplicatedAndDifferWhereSplit) {
  const std::uint64_t base = 1234;
  // For each split kind, the coordinate that must differ for the seeds to differ.
  auto check = [&](const Layout& layout, GroupKind kind, auto&& coordinate) {
    for (int a = 0; a < layout.world_size(); ++a)
      for (int b = 0; b < layout.world_size(); ++b) {
        const bool same = coordinate(layout.coordinates(a), a) == coordinate(layout.coordinates(b), b);
        EXPECT_EQ(layout.rng_seed(base, kind, a) == layout.rng_seed(base, kind, b), same)
            << group_name(kind) << " ranks " << a << ", " << b;
      }
  };
  const Layout dpt({.world_size = 8, .data = 2, .pipeline = 2, .tensor = 2});
  check(dpt, GroupKind::data, [](const Coordinates& c, int) { return c.data; });
  check(dpt, GroupKind::tensor, [](const Coordinates& c, int) { return c.tensor; });
  check(dpt, GroupKind::pipeline, [](const Coordinates& c, int) { return c.pipeline; });
  check(dpt, GroupKind::world, [](const Coordinates&, int rank) { return rank; });
  const Layout ds({.world_size = 8, .data = 2, .sequence = 4});
  check(ds, GroupKind::sequence, [](const Coordinates& c, int) { return c.sequence; });
  check(ds, GroupKind::data, [](const Coordinates& c, int) { return c.data; });
  const Layout grid({.world_size = 8, .tensor = 8, .mode = k2p5d, .depth = 2});
  check(grid, GroupKind::tensor_row, [](const Coordinates& c, int) { return c.col; });
  check(grid, GroupKind::tensor_depth, [](const Coordinates& c, int) { return c.depth; });

  // Streams of different kinds, or of different bases, do not collide at equal indices.
  EXPECT_NE(dpt.rng_seed(base, GroupKind::data, 2), dpt.rng_seed(base, GroupKind::tensor, 1));
  EXPECT_NE(dpt.rng_seed(base, GroupKind::data, 0), dpt.rng_seed(base + 1, GroupKind::data, 0));
  // A seed depends on (base, kind, index in the group) only, not on the rest of the mesh.
  EXPECT_EQ(Layout({.world_size = 1}).rng_seed(base, GroupKind::data, 0), dpt.rng_seed(base, GroupKind::data, 0));
  // A resumed run must draw the same streams: the value is pinned (checked independently as
  // splitmix64(splitmix64(1234 ^ fnv1a64("data")) ^ 1)) so that changing the mix is deliberate.
  EXPECT_EQ(dpt.rng_seed(base, GroupKind::data, 2), 8844383306767596846ull);
}

TEST(ParallelLayout, ParsesTensorModes) {
  EXPECT_EQ(config::parse_choice<TensorMode>("1d"), TensorMode::d1);
  EXPECT_EQ(config::parse_choice<TensorMode>("2d"), TensorMode::d2);
  EXPECT_EQ(config::parse_choice<TensorMode>("2.5d"), TensorMode::d2p5);
  EXPECT_EQ(config::parse_choice<TensorMode>("3d"), TensorMode::d3);
  EXPECT_EQ(config::name_of(TensorMode::d2p5), "2.5d");
  EXPECT_EQ(group_name(GroupKind::tensor_row), "tensor_row");
  try {
    config::load_config("", {"parallel.tensor.mode=4d"});
    ADD_FAILURE() << "4d accepted";
  } catch (const Error& e) {
    expect_mentions(e.what(), {"parallel.tensor.mode", "\"4d\"", "2.5d"});
  }
}

TEST(ParallelLayout, ValidationErrorsNameTheKeyAndTheFix) {
  expect_mentions(error_of({.world_size = 0}), {"launched ranks must be >= 1"});
  expect_mentions(error_of({.world_size = 4, .data = 0, .tensor = 4}), {"parallel.data must be >= 1", "got 0"});
  expect_mentions(error_of({.world_size = 4, .pipeline = -1}), {"parallel.pipeline must be >= 1"});
  expect_mentions(error_of({.world_size = 4, .tensor = 0}), {"parallel.tensor.size must be >= 1"});
  expect_mentions(error_of({.world_size = 4, .sequence = 0}), {"parallel.sequence must be >= 1"});
  expect_mentions(error_of({.world_size = 1, .depth = 0}), {"parallel.tensor.depth must be >= 1"});
  expect_mentions(error_of({.world_size = 1, .ranks_per_node = -1}), {"ranks per node"});
  // Sizes come first: data = 0 also breaks the product, but the size is what to fix.
  expect_mentions(error_of({.world_size = 8, .data = 0}), {"parallel.data must be >= 1"});

  expect_mentions(error_of({.world_size = 8, .data = 2, .tensor = 2}),
                  {"parallel.data x parallel.pipeline x parallel.tensor.size x parallel.sequence = 2 x 1 x 2 x 1 = 4",
                   "but 8 were launched", "mpirun -np 4"});
  expect_mentions(error_of({.world_size = 4, .tensor = 2, .sequence = 2}),
                  {"parallel.sequence and parallel.tensor.size cannot both be > 1", "set one of them to 1"});
  expect_mentions(error_of({.world_size = 6, .tensor = 6, .mode = k2d}),
                  {"parallel.tensor.mode = \"2d\" needs a square parallel.tensor.size", "got 6"});
  expect_mentions(error_of({.world_size = 12, .tensor = 12, .mode = k2p5d, .depth = 2}),
                  {"\"2.5d\"", "parallel.tensor.size = q*q*parallel.tensor.depth", "parallel.tensor.depth = 2: 2, 8, 18",
                   "got parallel.tensor.size = 12"});
  expect_mentions(error_of({.world_size = 8, .tensor = 8, .mode = k2p5d, .depth = 3}),
                  {"parallel.tensor.depth = 3", "got parallel.tensor.size = 8"});
  expect_mentions(error_of({.world_size = 4, .tensor = 4, .mode = k3d}),
                  {"parallel.tensor.mode = \"3d\" needs a cubic parallel.tensor.size", "got 4"});
  expect_mentions(error_of({.world_size = 4, .tensor = 4, .mode = k2d, .depth = 2}),
                  {"parallel.tensor.depth = 2 applies only to parallel.tensor.mode = \"2.5d\"", "mode is \"2d\""});
  expect_mentions(error_of({.world_size = 2, .tensor = 2, .mode = k1d, .depth = 2}), {"parallel.tensor.depth = 2"});
  // The grid shape is checked before the stray depth.
  expect_mentions(error_of({.world_size = 6, .tensor = 6, .mode = k2d, .depth = 2}), {"square"});
}

TEST(ParallelLayout, ModelMustFitTheMesh) {
  const MeshSpec p4 = {.world_size = 4, .tensor = 4, .mode = k1d};
  EXPECT_EQ(fit_error(p4, 2, 4, 64, 64), "no error");
  expect_mentions(fit_error(p4, 2, 6, 96, 64), {"model.n_head (6)", "parallel.tensor.size (4)"});
  expect_mentions(fit_error(p4, 2, 4, 66, 64), {"model.n_embd (66)", "parallel.tensor.size (4)"});

  const MeshSpec q3 = {.world_size = 9, .tensor = 9, .mode = k2d};
  EXPECT_EQ(fit_error(q3, 2, 6, 96, 64), "no error");
  expect_mentions(fit_error(q3, 2, 6, 64, 64), {"model.n_embd (64)", "q = 3", "parallel.tensor.size = 9"});
  expect_mentions(fit_error(q3, 2, 4, 96, 64), {"model.n_head (4)", "q = 3"});

  const MeshSpec q2d2 = {.world_size = 8, .tensor = 8, .mode = k2p5d, .depth = 2};
  EXPECT_EQ(fit_error(q2d2, 2, 2, 64, 64), "no error");
  expect_mentions(fit_error(q2d2, 2, 3, 96, 64), {"model.n_head (3)", "q = 2", "\"2.5d\""});

  const MeshSpec l2 = {.world_size = 8, .tensor = 8, .mode = k3d};
  EXPECT_EQ(fit_error(l2, 2, 2, 8, 64), "no error");
  expect_mentions(fit_error(l2, 2, 2, 6, 64), {"model.n_embd (6)", "l*l = 4", "\"3d\""});
  expect_mentions(fit_error(l2, 2, 3, 12, 64), {"model.n_head (3)", "l = 2"});

  const MeshSpec s4 = {.world_size = 4, .sequence = 4};
  EXPECT_EQ(fit_error(s4, 2, 3, 96, 64), "no error");  // heads are not split by the sequence ring
  expect_mentions(fit_error(s4, 2, 2, 64, 30), {"model.seq_len (30)", "parallel.sequence (4)"});

  const MeshSpec pp4 = {.world_size = 4, .pipeline = 4};
  EXPECT_EQ(fit_error(pp4, 4, 2, 64, 64), "no error");
  expect_mentions(fit_error(pp4, 2, 2, 64, 64), {"model.n_layer (2)", "parallel.pipeline (4)"});
}

}  // namespace
}  // namespace tidal::parallel
