// NcclCommunicator: a Communicator over NCCL for device tensors. It runs its operations on its
// own CUDA stream, ordered after the compute stream by an event recorded at the call, so compute
// and communication overlap; a Work is complete when the event recorded after the operation on
// the communication stream has fired. The NCCL unique id is bootstrapped over a host
// communicator (MPI) of the same group.
//
// wait() blocks the host until the operation is done, with the watchdog's contract: past the
// timeout the NCCL communicator is aborted and the error names the group and the operation.
// Uneven all-gather / reduce-scatter parts run as a group of broadcasts / reduces (NCCL has no
// v-variants). One rank per GPU: NCCL rejects two ranks of a group on one device.
#pragma once

#include "comm/communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <memory>

namespace tidal::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (the same ranks, host side). `compute` is the stream whose work
  // every operation must follow (0 = the legacy default stream).
  NcclCommunicator(Communicator& bootstrap, int device, cudaStream_t compute, Seconds default_timeout);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  cudaStream_t stream() const { return stream_; }

  WorkPtr all_reduce(Tensor& t, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast(Tensor& t, const BroadcastOptions& options = {}) override;
  WorkPtr reduce(Tensor& t, const ReduceOptions& options = {}) override;
  WorkPtr all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options = {}) override;
  WorkPtr send(const Tensor& t, int dst, const PointToPointOptions& options = {}) override;
  WorkPtr recv(Tensor& t, int src, const PointToPointOptions& options = {}) override;
  WorkPtr barrier(const BarrierOptions& options = {}) override;

 private:
  // Orders the communication stream after compute, runs `issue` (NCCL calls on stream_), and
  // returns a Work that completes with the event recorded after it.
  template <class Issue>
  WorkPtr enqueue(const std::string& kind, Seconds timeout, std::vector<Tensor> keep, Issue&& issue);
  void check_tensor(const Tensor& t, const char* what) const;

  std::string name_;
  std::vector<int> world_ranks_;
  int rank_ = 0, size_ = 1, device_ = 0;
  cudaStream_t compute_ = nullptr, stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  Tensor barrier_word_;  // [1] f32 on the device: what barrier() all-reduces
  Seconds default_timeout_;
  std::int64_t issued_ = 0;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
};

// The group's NCCL communicator on this process's current GPU, ordered after the compute stream
// (core/cuda/runtime.h); bootstrapped over `bootstrap`, the same group on the host (MPI).
std::shared_ptr<Communicator> nccl_on_current_gpu(Communicator& bootstrap, Seconds timeout);

}  // namespace tidal::comm
