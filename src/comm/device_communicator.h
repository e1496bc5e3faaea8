// DeviceCommunicator: a group of ranks that each have a GPU of their own. Its collectives on GPU
// tensors go over NCCL (GPU to GPU: NVLink, InfiniBand); everything else goes over MPI through a
// StagedCommunicator: collectives on host tensors (loss sums, shapes, metrics), collectives whose
// operands sit on both sides (a checkpoint gathering a GPU tensor into host memory), and every
// send / recv. Point-to-point stays on MPI because its tags keep a pipeline's streams apart,
// where NCCL matches a peer's transfers by order alone. Each transport sees the same sequence of
// operations on every rank (the group's calls in program order, split by a rule of the operands
// alone), so neither can mismatch.
#pragma once

#include "comm/communicator.h"

#include <functional>
#include <memory>

namespace tidal::comm {

class DeviceCommunicator final : public Communicator {
 public:
  // `on_device(t)`: whether t is a GPU tensor (the GPU's staging rule; a test's own).
  DeviceCommunicator(std::shared_ptr<Communicator> device, std::shared_ptr<Communicator> staged,
                     std::function<bool(const Tensor&)> on_device)
      : device_(std::move(device)), staged_(std::move(staged)), on_device_(std::move(on_device)) {}

  int rank() const override { return staged_->rank(); }
  int size() const override { return staged_->size(); }
  const std::string& name() const override { return staged_->name(); }
  const std::vector<int>& world_ranks() const override { return staged_->world_ranks(); }

  WorkPtr all_reduce(Tensor& t, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast(Tensor& t, const BroadcastOptions& options = {}) override;
  WorkPtr reduce(Tensor& t, const ReduceOptions& options = {}) override;
  WorkPtr all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options = {}) override;
  WorkPtr send(const Tensor& t, int dst, const PointToPointOptions& options = {}) override;
  WorkPtr recv(Tensor& t, int src, const PointToPointOptions& options = {}) override;
  WorkPtr barrier(const BarrierOptions& options = {}) override;

 private:
  // NCCL's when every operand is on the GPU, else MPI's.
  Communicator& over(std::initializer_list<const Tensor*> operands);

  std::shared_ptr<Communicator> device_, staged_;
  std::function<bool(const Tensor&)> on_device_;
};

}  // namespace tidal::comm
