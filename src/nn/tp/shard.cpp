#include "nn/tp/shard.h"

#include "core/error.h"
#include "ops/grad_norm.h"

#include <algorithm>
#include <fmt/ranges.h>
#include <map>

namespace tidal::nn::tp {
namespace {

// The view of `full` that p's block (or its segment m's block) occupies: only its rows inside
// the full parameter, when the block runs into padding.
Tensor block_in(const Parameter& p, Tensor full, int m) {
  const std::int64_t s = p.segments == 1 ? rows_inside(p) : p.shape[0] / p.segments, S = full.dim(0) / p.segments;
  const std::int64_t first = m * S + (p.offset.size() ? p.offset[0] : 0);
  Tensor v = full.slice(0, first, first + s);
  for (int d = 1; d < p.shape.size(); ++d) {
    const std::int64_t o = p.offset.size() ? p.offset[d] : 0;
    v = v.slice(d, o, o + p.shape[d]);
  }
  return v;
}

// The rows of a local block `local` (p.shape) that hold segment m's block, or, unsegmented, the
// rows inside the full parameter.
Tensor segment(const Tensor& local, const Parameter& p, int m) {
  if (p.segments == 1) return local.slice(0, 0, rows_inside(p));
  const std::int64_t s = p.shape[0] / p.segments;
  return local.slice(0, m * s, (m + 1) * s);
}

}  // namespace

std::vector<Piece> pieces_of(const Parameter& p) {
  const int nd = p.shape.size();
  if (p.full_shape.size() == 0) return {Piece{.row = 0, .slice = {Shape(std::vector<std::int64_t>(std::size_t(nd), 0)), p.shape}}};
  const std::int64_t s = p.segments == 1 ? rows_inside(p) : p.shape[0] / p.segments, S = p.full_shape[0] / p.segments;
  std::vector<Piece> out;
  if (s == 0) return out;
  for (int m = 0; m < p.segments; ++m) {
    Piece piece{.row = m * s, .slice = {p.offset, p.shape}};
    piece.slice.start[0] = m * S + p.offset[0];
    piece.slice.extent[0] = s;
    out.push_back(piece);
  }
  return out;
}

io::HeldBlockKey save_block_key(const Parameter& p) {
  const std::vector<Piece> pieces = pieces_of(p);
  std::string key = p.name;
  for (const Piece& piece : pieces)
    key += fmt::format(" {}:{}+{}", piece.row, fmt::join(piece.slice.start, ","), fmt::join(piece.slice.extent, ","));
  return {key, 3 * block_elements(pieces) * std::int64_t(sizeof(float))};
}

Tensor gather_parameter(const Parameter& p, const Tensor& local, comm::Communicator& tensor_group) {
  TIDAL_ASSERT(local.shape() == p.shape, "{}: gathering {} for a block {}", p.name, local.str(), p.shape.str());
  if (p.full_shape.size() == 0) return local.clone();
  // Every rank's block (all the same shape: splits are equal) and where it starts; copies of a
  // block are equal, so whichever lands last is exact.
  const int n = tensor_group.size(), nd = p.shape.size();
  Tensor offset = Tensor::empty({nd}, DType::i32, host_allocator());  // read by the host
  for (int d = 0; d < nd; ++d) offset.data<std::int32_t>()[d] = std::int32_t(p.offset[d]);
  Tensor offsets = Tensor::empty({n * nd}, DType::i32, host_allocator());
  tensor_group.all_gather(offsets, offset)->wait();
  Tensor blocks = Tensor::empty({n * local.numel()});
  tensor_group.all_gather(blocks, local.is_contiguous() ? local : local.clone())->wait();
  Tensor full = Tensor::zeros(p.full_shape);
  Parameter at = p;  // p's metadata with each rank's offset in turn
  for (int r = 0; r < n; ++r) {
    for (int d = 0; d < nd; ++d) at.offset[d] = offsets.data<std::int32_t>()[r * nd + d];
    const Tensor block = blocks.slice(0, r * local.numel(), (r + 1) * local.numel()).reshape(p.shape);
    if (rows_inside(at) == 0) continue;  // a block wholly in the padding
    for (int m = 0; m < p.segments; ++m) block_in(at, full, m).copy_from(segment(block, at, m));
  }
  return full;
}

Tensor shard_of(const Parameter& p, const Tensor& full) {
  if (p.full_shape.size() == 0) return full.clone();
  TIDAL_CHECK(full.shape() == p.full_shape, "{}: {} for a parameter of shape {}", p.name, full.str(),
              p.full_shape.str());
  Tensor local = Tensor::zeros(p.shape, full.dtype());  // padding rows stay zero
  if (rows_inside(p) == 0) return local;
  for (int m = 0; m < p.segments; ++m) {
    Tensor dst = segment(local, p, m);
    dst.copy_from(block_in(p, full, m));
  }
  return local;
}

void copy_shard(const Parameter& p, std::span<const Tensor> rows, Tensor local) {
  TIDAL_ASSERT(!rows.empty() && local.shape() == p.shape && local.dtype() == rows[0].dtype(), "{}: {} pieces into {}",
               p.name, rows.size(), local.str());
  const Shape& full = p.full_shape.size() ? p.full_shape : p.shape;
  std::int64_t total = 0;
  for (const Tensor& r : rows) {
    TIDAL_ASSERT(r.ndim() == full.size() && r.dtype() == rows[0].dtype(), "{}: piece {}", p.name, r.str());
    for (int d = 1; d < full.size(); ++d) TIDAL_ASSERT(r.dim(d) == full[d], "{}: piece {} of {}", p.name, r.str(), full.str());
    total += r.dim(0);
  }
  TIDAL_ASSERT(total == full[0], "{}: pieces of {} rows for {}", p.name, total, full.str());
  // The block's rows [first, first + s) of the full tensor, gathered from the pieces they fall in;
  // the other dimensions sliced at p's offsets. Padding rows are zeroed.
  const std::int64_t inside = rows_inside(p);
  if (inside < p.shape[0]) local.slice(0, inside, p.shape[0]).zero_();
  const std::int64_t s = p.segments == 1 ? inside : p.shape[0] / p.segments, S = full[0] / p.segments;
  for (int m = 0; m < p.segments; ++m) {
    const std::int64_t first = m * S + (p.offset.size() ? p.offset[0] : 0);
    Tensor dst = segment(local, p, m);
    std::int64_t at = 0;  // the current piece's first row in the full tensor
    for (const Tensor& r : rows) {
      const std::int64_t lo = std::max(first, at), hi = std::min(first + s, at + r.dim(0));
      if (lo < hi) {
        Tensor src = r.slice(0, lo - at, hi - at);
        for (int d = 1; d < p.shape.size(); ++d) {
          const std::int64_t o = p.offset.size() ? p.offset[d] : 0;
          src = src.slice(d, o, o + p.shape[d]);
        }
        dst.slice(0, lo - first, hi - first).copy_from(src);
      }
      at += r.dim(0);
    }
  }
}

void copy_part_columns(Tensor panel, Tensor features, int part, int parts, int segments, bool into_features) {
  const std::int64_t s = panel.dim(1) / segments;
  for (int m = 0; m < segments; ++m) {
    const std::int64_t at = std::int64_t(m) * s, first = (std::int64_t(m) * parts + part) * s;
    Tensor in_panel = panel.slice(1, at, at + s), in_features = features.slice(1, first, first + s);
    if (into_features) in_features.copy_from(in_panel);
    else in_panel.copy_from(in_features);
  }
}

void reduce_replicated_gradients(std::span<Parameter* const> params) {
  // Level by level (replicas[0] of every parameter, then replicas[1], ...): a gradient summed
  // over the column group must be complete before it is summed over the depth group. Within a
  // level, groups go in name order, the same on every rank.
  std::map<std::pair<std::size_t, std::string>, std::pair<comm::Communicator*, std::vector<Parameter*>>> steps;
  for (Parameter* p : params)
    for (std::size_t level = 0; level < p->replicas.size(); ++level) {
      comm::Communicator* g = p->replicas[level];
      if (g->size() == 1) continue;
      auto& [group, members] = steps[{level, g->name()}];
      TIDAL_ASSERT(!group || group == g, "two groups named '{}' at one level", g->name());
      group = g;
      members.push_back(p);
    }
  for (auto& [key, step] : steps) {
    auto& [group, members] = step;
    std::int64_t n = 0;
    for (Parameter* p : members) n += p->grad.numel();
    Tensor flat = Tensor::empty({n});
    std::int64_t at = 0;
    for (Parameter* p : members) {
      flat.slice(0, at, at + p->grad.numel()).copy_from(p->grad.reshape({-1}));
      at += p->grad.numel();
    }
    group->all_reduce(flat)->wait();
    at = 0;
    for (Parameter* p : members) {
      Tensor g = p->grad.reshape({-1});
      g.copy_from(flat.slice(0, at, at + p->grad.numel()));
      at += p->grad.numel();
    }
  }
}

double squared_gradient_norm(std::span<Parameter* const> params, comm::Communicator& tensor_group) {
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Parameter* p : params) grads.push_back(p->grad);
  const std::vector<double> squares = ops::sums_of_squares(grads);
  double local = 0;
  for (std::size_t i = 0; i < params.size(); ++i) local += squares[i] / double(params[i]->copies);
  Tensor v = Tensor::empty({1}, DType::f32, host_allocator());
  // Summed in fp32 over a handful of ranks: the relative error (1e-7) is far below clipping's needs.
  v.data<float>()[0] = float(local);
  tensor_group.all_reduce(v)->wait();
  return double(v.data<float>()[0]);
}

}  // namespace tidal::nn::tp
