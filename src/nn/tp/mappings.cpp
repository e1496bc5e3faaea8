#include "nn/tp/mappings.h"

#include "core/error.h"

namespace tidal::nn::tp {
namespace {

int normalize(const Tensor& x, int dim) {
  const int d = dim < 0 ? dim + x.ndim() : dim;
  TIDAL_ASSERT(d >= 0 && d < x.ndim(), "dim {} of {}", dim, x.str());
  return d;
}

// Moves `dim` to the front: [..., n, ...] -> [n, ...rest], so that rank slices of `dim` are
// contiguous blocks for the collectives: a copy, except of the first dimension of a contiguous
// tensor, which is there already (the collectives only read it).
Tensor dim_to_front(const Tensor& x, int d) {
  if (d == 0) return x.is_contiguous() ? x : x.clone();
  std::vector<std::int64_t> dims{x.dim(d)};
  for (int i = 0; i < x.ndim(); ++i)
    if (i != d) dims.push_back(x.dim(i));
  Tensor y = Tensor::empty(Shape(dims), x.dtype());
  for (std::int64_t i = 0; i < x.dim(d); ++i) {
    Tensor dst = y.slice(0, i, i + 1);
    Tensor src = x.slice(d, i, i + 1);
    dst.reshape(src.shape()).copy_from(src);
  }
  return y;
}

// Inverse of dim_to_front for a tensor whose front extent is `n`, into the layout of `like`
// with dim d of extent n.
Tensor front_to_dim(const Tensor& y, int d, const Shape& shape) {
  if (d == 0) return y.reshape(shape);
  Tensor x = Tensor::empty(shape, y.dtype());
  for (std::int64_t i = 0; i < shape[d]; ++i) {
    Tensor dst = x.slice(d, i, i + 1);
    Tensor src = y.slice(0, i, i + 1);
    dst.copy_from(src.reshape(dst.shape()));
  }
  return x;
}

}  // namespace

Tensor slice_for_rank(const Tensor& x, int dim, int rank, int parts) {
  const int d = normalize(x, dim);
  TIDAL_CHECK(x.dim(d) % parts == 0, "splitting {} along dim {} into {} equal parts: {} is not divisible by {}",
              x.str(), d, parts, x.dim(d), parts);
  const std::int64_t k = x.dim(d) / parts;
  return x.slice(d, rank * k, (rank + 1) * k).clone();
}

Tensor all_gather_along(const Tensor& x, comm::Communicator& g, int dim) {
  const int d = normalize(x, dim);
  Shape out_shape = x.shape();
  out_shape[d] *= g.size();
  Tensor front = dim_to_front(x, d);  // [k, rest]
  Shape gathered_shape = front.shape();
  gathered_shape[0] *= g.size();
  Tensor gathered = Tensor::empty(gathered_shape, x.dtype());  // [p*k, rest]: rank blocks in order
  g.all_gather(gathered, front)->wait();
  return front_to_dim(gathered, d, out_shape);
}

Tensor reduce_scatter_along(const Tensor& x, comm::Communicator& g, int dim) {
  const int d = normalize(x, dim);
  TIDAL_CHECK(x.dim(d) % g.size() == 0, "reduce-scatter of {} along dim {} over {} ranks: {} is not divisible by {}",
              x.str(), d, g.size(), x.dim(d), g.size());
  Shape out_shape = x.shape();
  out_shape[d] /= g.size();
  Tensor front = dim_to_front(x, d);  // [p*k, rest]
  Shape part_shape = front.shape();
  part_shape[0] /= g.size();
  Tensor part = Tensor::empty(part_shape, x.dtype());
  g.reduce_scatter(part, front)->wait();
  return front_to_dim(part, d, out_shape);
}

Tensor CopyToGroup::forward(const Tensor& x, comm::Communicator&) { return x; }
Tensor CopyToGroup::backward(const Tensor& dy, comm::Communicator& g) { return backward(dy.clone(), g); }
Tensor CopyToGroup::backward(Tensor&& partial, comm::Communicator& g) {
  TIDAL_ASSERT(partial.is_contiguous(), "an all-reduce in place of {}: not contiguous", partial.str());
  g.all_reduce(partial)->wait();
  return std::move(partial);
}

Tensor ReduceFromGroup::forward(const Tensor& x, comm::Communicator& g) { return CopyToGroup::backward(x, g); }
Tensor ReduceFromGroup::forward(Tensor&& partial, comm::Communicator& g) {
  return CopyToGroup::backward(std::move(partial), g);
}
Tensor ReduceFromGroup::backward(const Tensor& dy, comm::Communicator&) { return dy; }

Tensor ScatterToGroup::forward(const Tensor& x, comm::Communicator& g, int dim) {
  return slice_for_rank(x, dim, g.rank(), g.size());
}
Tensor ScatterToGroup::backward(const Tensor& dy, comm::Communicator& g, int dim) { return all_gather_along(dy, g, dim); }

Tensor GatherFromGroup::forward(const Tensor& x, comm::Communicator& g, int dim) { return all_gather_along(x, g, dim); }
Tensor GatherFromGroup::backward(const Tensor& dy, comm::Communicator& g, int dim) {
  return slice_for_rank(dy, dim, g.rank(), g.size());
}

Tensor ReduceScatterGroup::forward(const Tensor& x, comm::Communicator& g, int dim) {
  return reduce_scatter_along(x, g, dim);
}
Tensor ReduceScatterGroup::backward(const Tensor& dy, comm::Communicator& g, int dim) {
  return all_gather_along(dy, g, dim);
}

Tensor AllGatherGroup::forward(const Tensor& x, comm::Communicator& g, int dim) { return all_gather_along(x, g, dim); }
Tensor AllGatherGroup::backward(const Tensor& dy, comm::Communicator& g, int dim) {
  return reduce_scatter_along(dy, g, dim);
}

Tensor BroadcastFrom::forward(const Tensor& x, comm::Communicator& g, int root) {
  Tensor y = x.clone();
  g.broadcast(y, {.root = root})->wait();
  return y;
}
Tensor BroadcastFrom::backward(const Tensor& dy, comm::Communicator& g, int root) {
  // The adjoint of a broadcast: every rank's gradient summed at the root; other ranks' inputs
  // did not reach the output, so their gradient is zero.
  Tensor dx = dy.clone();
  g.reduce(dx, {.op = comm::ReduceOp::sum, .root = root})->wait();
  if (g.rank() != root) dx.zero_();
  return dx;
}

}  // namespace tidal::nn::tp
