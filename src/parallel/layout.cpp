// Layout: validation of a MeshSpec, the rank <-> coordinates arithmetic, group enumeration and
// rng seeds. The rank order and group orders are documented in layout.h.
#include "parallel/layout.h"

#include "core/error.h"
#include "core/philox.h"

#include <algorithm>
#include <numeric>

namespace tidal::parallel {
namespace {

// r such that r^power == value, or 0 when there is none.
int exact_root(int value, int power) {
  for (std::int64_t r = 1;; ++r) {
    std::int64_t p = 1;
    for (int e = 0; e < power; ++e) p *= r;
    if (p == value) return int(r);
    if (p > value) return 0;
  }
}

// The a x b block of the q x q grid that one node holds. Per optimus-2d Fig. 8, a natural
// row-major arrangement puts a whole grid row on one node, so every column broadcast crosses all
// nodes; blocks that are as square as possible make both row and column groups touch only
// q/b resp. q/a nodes. A block fits when a*b = n, a | q and b | q. A 1 x q block is exactly the
// row-major order, which is what we fall back to when the node size is unknown (n = 0), holds a
// whole layer (n >= q*q), or tiles no block.
struct Block {
  int a = 1, b = 1;
};

Block tensor_grid_block(int q, int ranks_per_node) {
  Block best{1, q};
  const int n = ranks_per_node;
  if (n <= 1 || n >= q * q || (q * q) % n != 0) return best;
  bool found = false;
  for (int a = 1; a * a <= n; ++a) {
    const int b = n / a;
    if (n % a != 0 || q % a != 0 || q % b != 0) continue;
    if (!found || b - a < best.b - best.a) best = {a, b};
    found = true;
  }
  return best;
}

// splitmix64's output function (Steele, Lea, Flood, OOPSLA'14): a bijection on 64 bits whose
// outputs for nearby inputs look independent, so small indices give unrelated seeds.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void check_sizes(const MeshSpec& s) {
  TIDAL_CHECK(s.world_size >= 1, "the number of launched ranks must be >= 1, got {}", s.world_size);
  const std::pair<const char*, int> sizes[] = {{"parallel.data", s.data},
                                               {"parallel.pipeline", s.pipeline},
                                               {"parallel.tensor.size", s.tensor},
                                               {"parallel.sequence", s.sequence},
                                               {"parallel.tensor.depth", s.depth}};
  for (const auto& [key, value] : sizes)
    TIDAL_CHECK(value >= 1, "{} must be >= 1 (1 = no parallelism along that axis), got {}", key, value);
  TIDAL_CHECK(s.expert >= 1 && s.data % s.expert == 0,
              "parallel.expert = {} must divide parallel.data = {}: the experts are spread over groups of that many "
              "data ranks (Megatron's and DeepSpeed's expert parallelism); raise parallel.data or lower "
              "parallel.expert", s.expert, s.data);
  TIDAL_CHECK(s.ranks_per_node >= 0, "ranks per node must be >= 0 (0 = unknown), got {}", s.ranks_per_node);

  const std::int64_t ranks = std::int64_t(s.data) * s.pipeline * s.tensor * s.sequence;
  TIDAL_CHECK(ranks == s.world_size,
              "parallel.data x parallel.pipeline x parallel.tensor.size x parallel.sequence = {} x {} x {} x {} = {} "
              "ranks, but {} {} launched (start with mpirun -np {}, or change [parallel])",
              s.data, s.pipeline, s.tensor, s.sequence, ranks, s.world_size, s.world_size == 1 ? "was" : "were",
              ranks);
  TIDAL_CHECK(s.tensor == 1 || s.sequence == 1,
              "parallel.sequence and parallel.tensor.size cannot both be > 1 (got {} and {}); sequence parallelism "
              "replaces tensor parallelism's split: set one of them to 1",
              s.sequence, s.tensor);
}

// The grid side (p, q or l) of a validated tensor size for `s.mode`.
int check_tensor_shape(const MeshSpec& s) {
  switch (s.mode) {
    case TensorMode::d1:
      return s.tensor;
    case TensorMode::d2: {
      const int q = exact_root(s.tensor, 2);
      TIDAL_CHECK(q > 0, "parallel.tensor.mode = \"2d\" needs a square parallel.tensor.size (q*q: 4, 9, 16, ...); got {}",
                  s.tensor);
      return q;
    }
    case TensorMode::d2p5: {
      const int q = s.tensor % s.depth == 0 ? exact_root(s.tensor / s.depth, 2) : 0;
      TIDAL_CHECK(q > 0,
                  "parallel.tensor.mode = \"2.5d\" needs parallel.tensor.size = q*q*parallel.tensor.depth for an "
                  "integer q (with parallel.tensor.depth = {}: {}, {}, {}, {}, ...); got parallel.tensor.size = {}: "
                  "change one of the two",
                  s.depth, s.depth, 4 * s.depth, 9 * s.depth, 16 * s.depth, s.tensor);
      return q;
    }
    case TensorMode::d3: {
      const int l = exact_root(s.tensor, 3);
      TIDAL_CHECK(l > 0, "parallel.tensor.mode = \"3d\" needs a cubic parallel.tensor.size (l*l*l: 8, 27, 64, ...); got {}",
                  s.tensor);
      return l;
    }
  }
  TIDAL_ASSERT(false, "unknown tensor mode {}", int(s.mode));
}

}  // namespace

std::string_view group_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::world: return "world";
    case GroupKind::data: return "data";
    case GroupKind::pipeline: return "pipeline";
    case GroupKind::tensor: return "tensor";
    case GroupKind::tensor_row: return "tensor_row";
    case GroupKind::tensor_col: return "tensor_col";
    case GroupKind::tensor_depth: return "tensor_depth";
    case GroupKind::tensor_x: return "tensor_x";
    case GroupKind::tensor_y: return "tensor_y";
    case GroupKind::tensor_z: return "tensor_z";
    case GroupKind::sequence: return "sequence";
    case GroupKind::model: return "model";
    case GroupKind::data_sequence: return "data_sequence";
    case GroupKind::pipeline_ends: return "pipeline_ends";
    case GroupKind::expert: return "expert";
    case GroupKind::expert_data: return "expert_data";
  }
  TIDAL_ASSERT(false, "unknown group kind {}", int(kind));
}

Layout::Layout(const MeshSpec& spec) : spec_(spec) {
  check_sizes(spec_);
  side_ = check_tensor_shape(spec_);
  TIDAL_CHECK(spec_.depth == 1 || spec_.mode == TensorMode::d2p5,
              "parallel.tensor.depth = {} applies only to parallel.tensor.mode = \"2.5d\" (mode is \"{}\"): set "
              "parallel.tensor.depth = 1 or use mode \"2.5d\"",
              spec_.depth, tensor_mode_name(spec_.mode));

  const int t_size = spec_.tensor;
  cell_of_tensor_.resize(t_size);
  if (spec_.mode == TensorMode::d1) return;  // no grid: every tensor rank sits at (0, 0, 0)

  if (spec_.mode == TensorMode::d3) {
    rows_ = cols_ = depths_ = side_;
    for (int t = 0; t < t_size; ++t) cell_of_tensor_[t] = {t / (side_ * side_), (t / side_) % side_, t % side_};
  } else {
    // 2d is 2.5d with one layer; each layer of q*q ranks is tiled by node blocks.
    const int q = side_, layer = q * q;
    rows_ = cols_ = q;
    depths_ = spec_.depth;
    const Block blk = tensor_grid_block(q, spec_.ranks_per_node);
    const int n = blk.a * blk.b, blocks_per_row = q / blk.b;
    for (int t = 0; t < t_size; ++t) {
      const int w = t % layer, block = w / n, in_block = w % n;
      cell_of_tensor_[t] = {(block / blocks_per_row) * blk.a + in_block / blk.b,
                            (block % blocks_per_row) * blk.b + in_block % blk.b, t / layer};
    }
  }
  tensor_of_cell_.assign(t_size, -1);
  for (int t = 0; t < t_size; ++t) {
    const Cell& c = cell_of_tensor_[t];
    int& slot = tensor_of_cell_[cell_index(c.row, c.col, c.depth)];
    TIDAL_ASSERT(slot == -1, "tensor ranks {} and {} share grid cell ({}, {}, {})", slot, t, c.row, c.col, c.depth);
    slot = t;
  }
}

void Layout::check_rank(int rank) const {
  TIDAL_ASSERT(rank >= 0 && rank < spec_.world_size, "rank {} outside a world of {}", rank, spec_.world_size);
}

int Layout::cell_index(int row, int col, int depth) const {
  TIDAL_ASSERT(row >= 0 && row < rows_ && col >= 0 && col < cols_ && depth >= 0 && depth < depths_,
               "grid position ({}, {}, {}) outside {} x {} x {}", row, col, depth, rows_, cols_, depths_);
  return (depth * rows_ + row) * cols_ + col;
}

int Layout::rank_from(int tensor, int sequence, int data, int pipeline) const {
  TIDAL_ASSERT(tensor >= 0 && tensor < spec_.tensor && sequence >= 0 && sequence < spec_.sequence && data >= 0 &&
                   data < spec_.data && pipeline >= 0 && pipeline < spec_.pipeline,
               "coordinates (tensor {}, sequence {}, data {}, pipeline {}) outside the mesh", tensor, sequence, data,
               pipeline);
  return tensor + spec_.tensor * (sequence + spec_.sequence * (data + spec_.data * pipeline));
}

int Layout::sample_parts() const {
  if (spec_.tensor == 1 || spec_.mode == TensorMode::d1) return 1;
  if (spec_.mode == TensorMode::d2) return side_;
  return spec_.mode == TensorMode::d2p5 ? side_ * spec_.depth : side_ * side_;
}

Coordinates Layout::coordinates(int rank) const {
  check_rank(rank);
  Coordinates c;
  int rest = rank;
  c.tensor = rest % spec_.tensor;
  rest /= spec_.tensor;
  c.sequence = rest % spec_.sequence;
  rest /= spec_.sequence;
  c.data = rest % spec_.data;
  c.pipeline = rest / spec_.data;
  const Cell& cell = cell_of_tensor_[c.tensor];
  c.row = cell.row;
  c.col = cell.col;
  c.depth = cell.depth;
  return c;
}

int Layout::rank_of(const Coordinates& c) const {
  const int cell = cell_index(c.row, c.col, c.depth);  // also checks the grid position is in range
  const int t = tensor_of_cell_.empty() ? c.tensor : tensor_of_cell_[cell];
  return rank_from(t, c.sequence, c.data, c.pipeline);
}

std::vector<int> Layout::group(GroupKind kind, int rank) const {
  const Coordinates c = coordinates(rank);
  // The ranks that differ from `rank` only in `field`, in that field's order.
  auto along = [&](int extent, int Coordinates::*field) {
    std::vector<int> out(extent);
    for (int v = 0; v < extent; ++v) {
      Coordinates other = c;
      other.*field = v;
      out[v] = rank_of(other);
    }
    return out;
  };
  const bool grid = spec_.mode == TensorMode::d2 || spec_.mode == TensorMode::d2p5;
  const bool cube = spec_.mode == TensorMode::d3;
  switch (kind) {
    case GroupKind::world: {
      std::vector<int> out(spec_.world_size);
      std::iota(out.begin(), out.end(), 0);
      return out;
    }
    case GroupKind::data: return along(spec_.data, &Coordinates::data);
    case GroupKind::pipeline: return along(spec_.pipeline, &Coordinates::pipeline);
    case GroupKind::sequence: return along(spec_.sequence, &Coordinates::sequence);
    case GroupKind::tensor: {
      // Contiguous by construction of the rank order.
      std::vector<int> out(spec_.tensor);
      std::iota(out.begin(), out.end(), rank - c.tensor);
      return out;
    }
    case GroupKind::model: {
      std::vector<int> out;
      for (int p = 0; p < spec_.pipeline; ++p)
        for (int s = 0; s < spec_.sequence; ++s)
          for (int t = 0; t < spec_.tensor; ++t) out.push_back(rank_from(t, s, c.data, p));
      return out;
    }
    case GroupKind::pipeline_ends: {
      const int last = spec_.pipeline - 1;
      if (last == 0 || (c.pipeline != 0 && c.pipeline != last)) return {rank};
      Coordinates first_stage = c, last_stage = c;
      first_stage.pipeline = 0;
      last_stage.pipeline = last;
      return {rank_of(first_stage), rank_of(last_stage)};
    }
    case GroupKind::data_sequence: {
      std::vector<int> out;
      for (int d = 0; d < spec_.data; ++d)
        for (int s = 0; s < spec_.sequence; ++s) out.push_back(rank_from(c.tensor, s, d, c.pipeline));
      return out;
    }
    case GroupKind::expert: {
      std::vector<int> out;
      const int first = c.data / spec_.expert * spec_.expert;
      for (int d = first; d < first + spec_.expert; ++d) out.push_back(rank_from(c.tensor, c.sequence, d, c.pipeline));
      return out;
    }
    case GroupKind::expert_data: {
      std::vector<int> out;
      for (int d = c.data % spec_.expert; d < spec_.data; d += spec_.expert)
        for (int s = 0; s < spec_.sequence; ++s) out.push_back(rank_from(c.tensor, s, d, c.pipeline));
      return out;
    }
    case GroupKind::tensor_row: return grid ? along(cols_, &Coordinates::col) : std::vector<int>{rank};
    case GroupKind::tensor_col: return grid ? along(rows_, &Coordinates::row) : std::vector<int>{rank};
    case GroupKind::tensor_depth: return grid ? along(depths_, &Coordinates::depth) : std::vector<int>{rank};
    case GroupKind::tensor_x: return cube ? along(side_, &Coordinates::row) : std::vector<int>{rank};
    case GroupKind::tensor_y: return cube ? along(side_, &Coordinates::col) : std::vector<int>{rank};
    case GroupKind::tensor_z: return cube ? along(side_, &Coordinates::depth) : std::vector<int>{rank};
  }
  TIDAL_ASSERT(false, "unknown group kind {}", int(kind));
}

int Layout::group_index(GroupKind kind, int rank) const {
  const std::vector<int> g = group(kind, rank);
  const auto it = std::find(g.begin(), g.end(), rank);
  TIDAL_ASSERT(it != g.end(), "rank {} missing from its own {} group", rank, group_name(kind));
  return int(it - g.begin());
}

std::vector<std::vector<int>> Layout::groups(GroupKind kind) const {
  // Scanning ranks upwards, the first rank not yet placed is the smallest of its group.
  std::vector<std::vector<int>> out;
  std::vector<bool> placed(spec_.world_size, false);
  for (int r = 0; r < spec_.world_size; ++r) {
    if (placed[r]) continue;
    out.push_back(group(kind, r));
    for (int member : out.back()) {
      TIDAL_ASSERT(!placed[member], "{} groups overlap at rank {}", group_name(kind), member);
      placed[member] = true;
    }
  }
  return out;
}

int Layout::pipeline_prev(int rank) const {
  Coordinates c = coordinates(rank);
  if (c.pipeline == 0) return -1;
  --c.pipeline;
  return rank_of(c);
}

int Layout::pipeline_next(int rank) const {
  Coordinates c = coordinates(rank);
  if (c.pipeline + 1 == spec_.pipeline) return -1;
  ++c.pipeline;
  return rank_of(c);
}

int Layout::sequence_prev(int rank) const {
  Coordinates c = coordinates(rank);
  c.sequence = (c.sequence + spec_.sequence - 1) % spec_.sequence;
  return rank_of(c);
}

int Layout::sequence_next(int rank) const {
  Coordinates c = coordinates(rank);
  c.sequence = (c.sequence + 1) % spec_.sequence;
  return rank_of(c);
}

std::uint64_t Layout::rng_seed(std::uint64_t base, GroupKind split_by, int rank) const {
  // Hashing the kind's name rather than its enumerator value keeps seeds stable if the enum is
  // reordered, so a resumed run draws the same streams.
  const std::string_view name = group_name(split_by);
  const std::uint64_t kind_tag = fnv1a64(name.data(), name.size());
  return mix64(mix64(base ^ kind_tag) ^ std::uint64_t(group_index(split_by, rank)));
}

void check_model_fits(const Layout& layout, int n_layer, int n_head, std::int64_t n_embd, std::int64_t seq_len,
                      std::int64_t num_classes, int n_kv_head) {
  const MeshSpec& s = layout.spec();
  TIDAL_CHECK(n_layer >= s.pipeline,
              "model.n_layer ({}) must be >= parallel.pipeline ({}): every pipeline stage needs at least one layer; "
              "use more layers or fewer stages",
              n_layer, s.pipeline);
  TIDAL_CHECK(seq_len % s.sequence == 0,
              "model.seq_len ({}) must be divisible by parallel.sequence ({}): each ring position holds an equal "
              "slice of the sequence",
              seq_len, s.sequence);
  TIDAL_CHECK(!s.sequence_zigzag || s.sequence == 1 || seq_len % (2 * s.sequence) == 0,
              "model.seq_len ({}) must be divisible by 2 x parallel.sequence ({}) with parallel.sequence_zigzag = true: "
              "each ring position holds two equal chunks (r and 2N-1-r of 2N); change model.seq_len or set "
              "parallel.sequence_zigzag = false",
              seq_len, 2 * s.sequence);
  if (s.sequence > 1 && s.sequence_mode == SequenceMode::ulysses) {
    const int kv = n_kv_head > 0 ? n_kv_head : n_head;
    TIDAL_CHECK(n_head % s.sequence == 0 && kv % s.sequence == 0,
                "parallel.sequence_mode = \"ulysses\" gives each of the parallel.sequence ({}) ranks an equal share of "
                "the heads: model.n_head ({}){} must be divisible by it; change parallel.sequence or use "
                "parallel.sequence_mode = \"ring\"",
                s.sequence, n_head, kv != n_head ? fmt::format(" and model.n_kv_head ({})", kv) : "");
  }

  // `what` names the divisor in terms of the parallel keys that make it.
  auto divisible = [](std::string_view key, std::int64_t value, std::int64_t divisor, const std::string& what) {
    TIDAL_CHECK(value % divisor == 0, "{} ({}) must be divisible by {}; change {} or the [parallel] sizes", key, value,
                what, key);
  };
  const int side = layout.tensor_side();
  // Each rank holds whole groups of query heads with their key / value head (nn/attention.h).
  const std::string kv_why = ": each rank holds whole groups of query heads with their key / value head";
  const std::string grid = fmt::format("parallel.tensor.mode = \"{}\", parallel.tensor.size = {}",
                                       tensor_mode_name(s.mode), s.tensor);
  switch (s.mode) {
    case TensorMode::d1: {
      const std::string what = fmt::format("parallel.tensor.size ({})", s.tensor);
      divisible("model.n_head", n_head, s.tensor, what);
      if (n_kv_head) divisible("model.n_kv_head", n_kv_head, s.tensor, what + kv_why);
      divisible("model.n_embd", n_embd, s.tensor, what);
      if (num_classes) divisible("model.num_classes", num_classes, s.tensor, what);
      break;
    }
    case TensorMode::d2:
    case TensorMode::d2p5: {
      const std::string what = fmt::format("the grid side q = {} ({})", side, grid);
      divisible("model.n_head", n_head, side, what);
      if (n_kv_head) divisible("model.n_kv_head", n_kv_head, side, what + kv_why);
      divisible("model.n_embd", n_embd, side, what);
      if (num_classes) divisible("model.num_classes", num_classes, side, what);
      break;
    }
    case TensorMode::d3: {
      divisible("model.n_head", n_head, side, fmt::format("the cube side l = {} ({})", side, grid));
      if (n_kv_head)
        divisible("model.n_kv_head", n_kv_head, side, fmt::format("the cube side l = {} ({})", side, grid) + kv_why);
      divisible("model.n_embd", n_embd, std::int64_t(side) * side, fmt::format("l*l = {} ({})", side * side, grid));
      if (num_classes) divisible("model.num_classes", num_classes, std::int64_t(side) * side, fmt::format("l*l = {} ({})", side * side, grid));
      break;
    }
  }
}

}  // namespace tidal::parallel
