// The communication of tensor- and sequence-parallel layers, as forward / backward pairs
// (Megatron-Core's `mappings`): each pair's backward is the adjoint of its forward, so a layer
// that calls F in forward calls F's backward on the gradient. Every layer's communication is
// built from these; each is tested alone (tests/mpi/test_mappings.cpp).
//
//   pair                  forward                                  backward
//   copy_to_group         identity                                 all-reduce (sum)
//   reduce_from_group     all-reduce (sum)                         identity
//   scatter_to_group      keep this rank's slice of dim `dim`      all-gather along `dim`
//   gather_from_group     all-gather along `dim`                   keep this rank's slice
//   reduce_scatter_group  reduce-scatter along `dim`               all-gather along `dim`
//   all_gather_group      all-gather along `dim`                   reduce-scatter along `dim`
//   broadcast_from        broadcast from `root` (SUMMA)            reduce (sum) to `root`
//
// Slices are equal: the group size must divide the extent of `dim`. Inputs are host tensors of
// any float dtype; outputs are new tensors (inputs are never modified), except where a layer
// hands over its own partial sum (an rvalue: the product it just made and needs no more), which
// the all-reduce sums in place.
#pragma once

#include "comm/communicator.h"

namespace tidal::nn::tp {

struct CopyToGroup {
  static Tensor forward(const Tensor& x, comm::Communicator& g);
  static Tensor backward(const Tensor& dy, comm::Communicator& g);
  static Tensor backward(Tensor&& partial, comm::Communicator& g);  // summed in place
};

struct ReduceFromGroup {
  static Tensor forward(const Tensor& x, comm::Communicator& g);
  static Tensor forward(Tensor&& partial, comm::Communicator& g);  // summed in place
  static Tensor backward(const Tensor& dy, comm::Communicator& g);
};

struct ScatterToGroup {
  static Tensor forward(const Tensor& x, comm::Communicator& g, int dim);
  static Tensor backward(const Tensor& dy, comm::Communicator& g, int dim);
};

struct GatherFromGroup {
  static Tensor forward(const Tensor& x, comm::Communicator& g, int dim);
  static Tensor backward(const Tensor& dy, comm::Communicator& g, int dim);
};

struct ReduceScatterGroup {
  static Tensor forward(const Tensor& x, comm::Communicator& g, int dim);
  static Tensor backward(const Tensor& dy, comm::Communicator& g, int dim);
};

struct AllGatherGroup {
  static Tensor forward(const Tensor& x, comm::Communicator& g, int dim);
  static Tensor backward(const Tensor& dy, comm::Communicator& g, int dim);
};

struct BroadcastFrom {
  static Tensor forward(const Tensor& x, comm::Communicator& g, int root);
  static Tensor backward(const Tensor& dy, comm::Communicator& g, int root);
};

// The building blocks, for layers with their own schedule: this rank's slice of `dim` (a copy),
// and the concatenation along `dim` of every rank's x, and the reduce-scatter along `dim`.
Tensor slice_for_rank(const Tensor& x, int dim, int rank, int parts);
Tensor all_gather_along(const Tensor& x, comm::Communicator& g, int dim);
Tensor reduce_scatter_along(const Tensor& x, comm::Communicator& g, int dim);

}  // namespace tidal::nn::tp
