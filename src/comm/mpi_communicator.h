// MpiCommunicator: a Communicator over an MPI communicator, for host tensors (fp32, bf16, fp16,
// int32). Each call becomes one non-blocking MPI operation started by the MpiProgress thread;
// bf16 / fp16 reductions use MPI user operations that add in fp32 and round once per step.
#pragma once

#include "comm/communicator.h"
#include "comm/mpi_progress.h"

#include <memory>

namespace tidal::comm {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MpiProgress& progress, std::shared_ptr<GroupInfo> group, Seconds default_timeout);

  int rank() const override { return rank_; }
  int size() const override { return int(group_->world_ranks.size()); }
  const std::string& name() const override { return group_->name; }
  const std::vector<int>& world_ranks() const override { return group_->world_ranks; }

  WorkPtr all_reduce(Tensor& t, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast(Tensor& t, const BroadcastOptions& options = {}) override;
  WorkPtr reduce(Tensor& t, const ReduceOptions& options = {}) override;
  WorkPtr all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options = {}) override;
  WorkPtr send(const Tensor& t, int dst, const PointToPointOptions& options = {}) override;
  WorkPtr recv(Tensor& t, int src, const PointToPointOptions& options = {}) override;
  WorkPtr barrier(const BarrierOptions& options = {}) override;

 private:
  // Fills in the bookkeeping every operation shares and hands it to the progress thread.
  WorkPtr submit(std::string kind, std::vector<int> waits_for, Seconds timeout, std::function<void(MPI_Request*)> start,
                 std::function<void()> finish = nullptr);
  WorkPtr submit_p2p(std::string kind, std::string peer_shows, int peer, Seconds timeout,
                     std::function<void(MPI_Request*)> start);
  std::vector<int> everyone() const;
  void check_tensor(const Tensor& t, const char* what) const;
  void check_rank(int r, const char* what, const char* role) const;

  MpiProgress& progress_;
  std::shared_ptr<GroupInfo> group_;
  Seconds default_timeout_;
  int rank_ = 0;
};

// Creates the user reduction operations for bf16 / fp16; call once after MPI_Init, and
// free_mpi_reductions() before MPI_Finalize.
void create_mpi_reductions();
void free_mpi_reductions();

}  // namespace tidal::comm
