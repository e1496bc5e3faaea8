// StagedCommunicator: collectives on tensors a host communicator cannot read (GPU memory), over
// that communicator (MPI): each operation copies its device operands into host buffers, runs
// the host operation on them, and copies the results back into the device tensors before its
// Work completes. What lets several ranks share one GPU, or use GPUs without NCCL.
//
// Which operand travels which way:
//   all_reduce, broadcast, reduce   t out and back (broadcast: the root's only out; reduce: back
//                                   on the root only, the other ranks' t unchanged)
//   all_gather, reduce_scatter      in out, out back
//   send / recv                     out / back
// Host tensors pass through unstaged. The copies back run on the thread that waits on (or polls)
// the Work, never on the host communicator's progress thread.
#pragma once

#include "comm/communicator.h"

#include <memory>

namespace tidal::comm {

// Where tensors live and how they reach the host: the GPU's (core/gpu.h: pinned host buffers,
// copies on the compute stream, complete on return) or a test's.
class Staging {
 public:
  virtual ~Staging() = default;
  // Whether the host communicator cannot use t directly.
  virtual bool needs_staging(const Tensor& t) const = 0;
  // A host tensor of t's shape and dtype holding t's values (copied when `copy`), complete on return.
  virtual Tensor to_host(const Tensor& t, bool copy) = 0;
  // host's values into t, complete on return.
  virtual void from_host(Tensor& t, const Tensor& host) = 0;
};

// The GPU's staging: page-locked host buffers, so the copies run at full PCIe / NVLink-C2C speed.
std::unique_ptr<Staging> gpu_staging();

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(std::shared_ptr<Communicator> host, std::shared_ptr<Staging> staging)
      : host_(std::move(host)), staging_(std::move(staging)) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::string& name() const override { return host_->name(); }
  const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }

  WorkPtr all_reduce(Tensor& t, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast(Tensor& t, const BroadcastOptions& options = {}) override;
  WorkPtr reduce(Tensor& t, const ReduceOptions& options = {}) override;
  WorkPtr all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options = {}) override;
  WorkPtr send(const Tensor& t, int dst, const PointToPointOptions& options = {}) override;
  WorkPtr recv(Tensor& t, int src, const PointToPointOptions& options = {}) override;
  WorkPtr barrier(const BarrierOptions& options = {}) override;

 private:
  // The host operand for t: t itself, or a host copy (of its values when `copy`).
  Tensor host_side(const Tensor& t, bool copy);
  // The host operation's Work, completed once `back` (when staged) has been copied into `device`.
  WorkPtr copy_back(WorkPtr work, Tensor device, Tensor back);

  std::shared_ptr<Communicator> host_;
  std::shared_ptr<Staging> staging_;
};

}  // namespace tidal::comm
