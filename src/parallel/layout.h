// The parallel mesh as pure arithmetic: which coordinates a world rank has in
// data x pipeline x (tensor | sequence), which ranks form each communication group, and the
// seeds of random streams that must agree or differ across them. Nothing here communicates:
// every rank computes the same answers from the MeshSpec alone, ParallelContext (context.h)
// turns the groups into communicators, and the unit test checks them against hand-written
// tables.
//
// Rank order. With T = tensor size, S = sequence size, D = data size:
//
//   rank = t + T * (s + S * (d + D * p))      (t tensor index, s sequence position, d data, p stage)
//
// so the tensor group (or the sequence ring) varies fastest, then data, and the pipeline stage
// slowest. Why: tensor and sequence groups communicate inside every layer, so they are
// contiguous ranks, which a launcher places on one node; data-parallel gradient reductions
// happen once per step; pipeline point-to-point traffic (one activation per micro-batch) is the
// lightest and may cross nodes. T > 1 and S > 1 together is rejected (sequence parallelism
// replaces tensor parallelism's split), so one of t and s is always 0.
//
// Inside the tensor group, index t maps to grid coordinates (row, col, depth):
//   1d  (p ranks):      row = col = depth = 0.
//   2d  (q x q):        row-major t = i*q + j, or "bunched" node blocks when ranks_per_node
//                       is known (optimus-2d Fig. 8(b)): see tensor_grid_block() in layout.cpp.
//   2.5d (q x q x d):   t = k*q*q + (index in depth layer k), each layer arranged as in 2d.
//   3d  (l x l x l):    t = x*l*l + y*l + z, stored as row = x, col = y, depth = z.
//
// Invariants: every GroupKind partitions 0..world-1; coordinates() and rank_of() are inverse.
#pragma once

#include "parallel/sequence_mode.h"
#include "parallel/tensor_mode.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tidal::parallel {


// Which group of a rank. Every kind partitions the world into disjoint groups; a rank's position
// in its group (see Layout::group) is its rank inside that group's communicator.
enum class GroupKind {
  world,
  data,          // same pipeline, tensor and sequence coordinates; ordered by data coordinate
  pipeline,      // all stages of one pipeline (same data, tensor, sequence); ordered by stage
  tensor,        // the whole tensor group (1d: p; 2d: q*q; 2.5d: q*q*d; 3d: l^3); ordered by t
  tensor_row,    // 2d / 2.5d: same row i (and depth k); ordered by column j
  tensor_col,    // 2d / 2.5d: same column j (and depth k); ordered by row i
  tensor_depth,  // 2.5d: same (i, j); ordered by depth k
  tensor_x,      // 3d: differ only in x; ordered by x
  tensor_y,      // 3d: differ only in y; ordered by y
  tensor_z,      // 3d: differ only in z; ordered by z
  sequence,      // the sequence-parallel ring; ordered by position in the ring
  model,         // pipeline x tensor x sequence: one model replica (same data); ascending rank
  data_sequence,  // data x sequence: the ranks holding the same parameters (same stage and
                  // tensor index) whose gradients are summed; ascending rank
  expert,        // parallel.expert consecutive data ranks (same other coordinates) that share a
                 // mixture's experts, each holding 1/expert of them; ordered by data coordinate
  expert_data,   // the ranks holding the same experts: data coordinates equal modulo
                 // parallel.expert, and every sequence position (whose positions' gradients are
                 // parts of the sum, as data_sequence's); their experts' gradients are summed;
                 // ascending rank
  pipeline_ends,  // the first and the last stage of one pipeline (they share tied embeddings);
                  // a middle stage alone; ordered by stage
};

// Every kind, in declaration order (the order ParallelContext creates their communicators).
inline constexpr GroupKind kAllGroupKinds[] = {
    GroupKind::world,      GroupKind::data,       GroupKind::pipeline,     GroupKind::tensor,
    GroupKind::tensor_row, GroupKind::tensor_col, GroupKind::tensor_depth, GroupKind::tensor_x,
    GroupKind::tensor_y,   GroupKind::tensor_z,   GroupKind::sequence,     GroupKind::model,
    GroupKind::data_sequence, GroupKind::pipeline_ends, GroupKind::expert, GroupKind::expert_data,
};

// "world", "data", "tensor_row", ... (the enumerator's name).
std::string_view group_name(GroupKind kind);

// What a run asks for (from [parallel] and the launcher).
struct MeshSpec {
  int world_size = 1;
  int data = 1, pipeline = 1, tensor = 1, sequence = 1;
  int expert = 1;  // parallel.expert: data ranks that split a mixture's experts (a divisor of data)
  bool sequence_zigzag = false;  // ring rank r holds chunks r and 2N - 1 - r of 2N (nn/batch_slice.h)
  SequenceMode sequence_mode = SequenceMode::ring;
  TensorMode mode = TensorMode::d1;
  int depth = 1;           // parallel.tensor.depth; 2.5d only
  int ranks_per_node = 0;  // 0 = unknown / all on one node; ranks fill nodes in rank order
};

struct Coordinates {
  int data = 0, pipeline = 0, sequence = 0;
  int tensor = 0;                   // index within the tensor group, 0..tensor-1
  int row = 0, col = 0, depth = 0;  // 2d / 2.5d: (i, j, k); 3d: (x, y, z); 1d: all 0
  friend bool operator==(const Coordinates&, const Coordinates&) = default;
};

class Layout {
 public:
  // Validates `spec` (tidal::Error naming the config key and the fix) and builds the mesh.
  explicit Layout(const MeshSpec& spec);

  const MeshSpec& spec() const { return spec_; }
  int world_size() const { return spec_.world_size; }
  // The side of the tensor grid: p (1d), q (2d, 2.5d), l (3d).
  int tensor_side() const { return side_; }
  // The parts each micro-batch's samples are split into over the tensor group: 2D, 2.5D and 3D
  // split them over q, q d and l^2 rows of the grid; 1D and no tensor parallelism keep them whole.
  int sample_parts() const;

  Coordinates coordinates(int rank) const;
  // Inverse of coordinates(). In 2d / 2.5d / 3d the grid position (row, col, depth) names the
  // tensor rank and `tensor` is not read (so a caller can ask for "the rank at (i, j+1)"); in 1d
  // `tensor` is read and row, col, depth must be 0.
  int rank_of(const Coordinates& c) const;

  // World ranks of the group of `kind` containing `rank`, in group order (a rank's position in
  // this vector is its rank inside the group). Kinds that do not apply to the mode (tensor_row
  // in 1d or 3d, tensor_x outside 3d, ...) give {rank} alone.
  std::vector<int> group(GroupKind kind, int rank) const;
  // `rank`'s position in group(kind, rank).
  int group_index(GroupKind kind, int rank) const;
  // Every group of `kind`, ordered by their smallest member (a partition of 0..world-1).
  std::vector<std::vector<int>> groups(GroupKind kind) const;

  // Pipeline neighbours: world rank of the previous / next stage, -1 at the ends.
  int pipeline_prev(int rank) const;
  int pipeline_next(int rank) const;
  // Sequence ring neighbours; they wrap around (a ring of one is its own neighbour).
  int sequence_prev(int rank) const;
  int sequence_next(int rank) const;

  // Seed of a random stream for data split across the groups of `split_by` and replicated
  // otherwise: a 64-bit mix of `base`, the kind, and group_index(split_by, rank). So ranks at
  // different positions of a `split_by` group get distinct streams, and ranks at the same
  // position (in different groups of that kind) get the same stream. Examples:
  //   data:     distinct per data coordinate, identical across tensor / sequence / stage peers
  //             (e.g. which samples a replica draws);
  //   tensor:   distinct per tensor position, identical across data replicas and stages;
  //   sequence: distinct per ring position;
  //   world:    distinct for every rank.
  // The kind is mixed in so that, say, data index 1 and tensor index 1 do not share a stream.
  std::uint64_t rng_seed(std::uint64_t base, GroupKind split_by, int rank) const;

 private:
  struct Cell {
    int row = 0, col = 0, depth = 0;
  };

  int rank_from(int tensor, int sequence, int data, int pipeline) const;
  int cell_index(int row, int col, int depth) const;
  void check_rank(int rank) const;

  MeshSpec spec_;
  int side_ = 1;                          // p, q or l
  int rows_ = 1, cols_ = 1, depths_ = 1;  // extents of (row, col, depth)
  std::vector<Cell> cell_of_tensor_;      // [tensor] t -> grid position
  std::vector<int> tensor_of_cell_;       // [rows_*cols_*depths_] grid position -> t; empty in 1d
};

// Whether a model can be split over `layout` (heads, width, sequence, layers and ViT's classes
// divisible as the mode needs); a tidal::Error naming the model.* and parallel.* keys otherwise.
// `num_classes` is ViT's (a head split as a linear's outputs); 0 skips that check. A vocabulary
// needs no check: it is padded to split (nn/tp/embedding.h). `n_kv_head`: grouped-query
// attention's key / value heads, split as the heads are (each rank holds whole groups); 0 = n_head.
void check_model_fits(const Layout& layout, int n_layer, int n_head, std::int64_t n_embd, std::int64_t seq_len,
                      std::int64_t num_classes = 0, int n_kv_head = 0);

}  // namespace tidal::parallel
