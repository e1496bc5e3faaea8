#include "comm/planning_communicator.h"

#include "core/error.h"

namespace tidal::comm {

void PlanningCommunicator::refuse(const char* op) const {
  detail::throw_internal(__FILE__, __LINE__, "a planned group",
                         fmt::format("{} on the planned group \"{}\" ({} ranks): a planning context never communicates",
                                     op, name_, members_.size()));
}

WorkPtr PlanningCommunicator::all_reduce(Tensor&, const AllReduceOptions&) { refuse("all_reduce"); }
WorkPtr PlanningCommunicator::broadcast(Tensor&, const BroadcastOptions&) { refuse("broadcast"); }
WorkPtr PlanningCommunicator::reduce(Tensor&, const ReduceOptions&) { refuse("reduce"); }
WorkPtr PlanningCommunicator::all_gather(Tensor&, const Tensor&, const AllGatherOptions&) { refuse("all_gather"); }
WorkPtr PlanningCommunicator::reduce_scatter(Tensor&, const Tensor&, const ReduceScatterOptions&) {
  refuse("reduce_scatter");
}
WorkPtr PlanningCommunicator::send(const Tensor&, int, const PointToPointOptions&) { refuse("send"); }
WorkPtr PlanningCommunicator::recv(Tensor&, int, const PointToPointOptions&) { refuse("recv"); }
WorkPtr PlanningCommunicator::barrier(const BarrierOptions&) { refuse("barrier"); }

}  // namespace tidal::comm
