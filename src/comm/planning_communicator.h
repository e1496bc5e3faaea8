// PlanningCommunicator: one rank's group as the cost model sees it (sim/): its name, size, this
// rank's place and the members' world ranks, for code that only asks who is in a group - building
// a rank's model and pipeline stages, laying out its chunks - without a launched world. A planned
// group never communicates: every operation is an internal error naming the group, so a planner
// that reached one would say so instead of hanging.
#pragma once

#include "comm/communicator.h"

#include <initializer_list>

namespace tidal::comm {

class PlanningCommunicator final : public Communicator {
 public:
  // `members`: the world ranks of the group in group order; `rank`: this rank's position in it.
  PlanningCommunicator(std::string name, std::vector<int> members, int rank)
      : name_(std::move(name)), members_(std::move(members)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return int(members_.size()); }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return members_; }

  WorkPtr all_reduce(Tensor& t, const AllReduceOptions& options = {}) override;
  WorkPtr broadcast(Tensor& t, const BroadcastOptions& options = {}) override;
  WorkPtr reduce(Tensor& t, const ReduceOptions& options = {}) override;
  WorkPtr all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options = {}) override;
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options = {}) override;
  WorkPtr send(const Tensor& t, int dst, const PointToPointOptions& options = {}) override;
  WorkPtr recv(Tensor& t, int src, const PointToPointOptions& options = {}) override;
  WorkPtr barrier(const BarrierOptions& options = {}) override;

 private:
  [[noreturn]] void refuse(const char* op) const;
  WorkPtr planned(const char* op, std::initializer_list<const Tensor*> tensors) const;

  std::string name_;
  std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace tidal::comm
