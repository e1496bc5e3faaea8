#include "comm/planning_communicator.h"

#include "core/error.h"

namespace tidal::comm {

void PlanningCommunicator::refuse(const char* op) const {
  detail::throw_internal(__FILE__, __LINE__, "a planned group",
                         fmt::format("{} on the planned group \"{}\" ({} ranks): a planning context never communicates",
                                     op, name_, members_.size()));
}

// A meta tensor's operation (core/device.h): nothing moves, it completes at once; the counting
// communicator around this one records it as a run's would.
WorkPtr PlanningCommunicator::planned(const char* op, std::initializer_list<const Tensor*> tensors) const {
  for (const Tensor* t : tensors)
    if (!t->device().is_meta()) refuse(op);
  auto w = std::make_shared<Work>();
  w->mark_completed();
  return w;
}

WorkPtr PlanningCommunicator::all_reduce(Tensor& t, const AllReduceOptions&) { return planned("all_reduce", {&t}); }
WorkPtr PlanningCommunicator::broadcast(Tensor& t, const BroadcastOptions&) { return planned("broadcast", {&t}); }
WorkPtr PlanningCommunicator::reduce(Tensor& t, const ReduceOptions&) { return planned("reduce", {&t}); }
WorkPtr PlanningCommunicator::all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) {
  gather_counts(*this, o.counts, in.numel(), out.numel(), "all_gather");
  return planned("all_gather", {&out, &in});
}
WorkPtr PlanningCommunicator::reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& o) {
  gather_counts(*this, o.counts, out.numel(), in.numel(), "reduce_scatter");
  return planned("reduce_scatter", {&out, &in});
}
WorkPtr PlanningCommunicator::send(const Tensor& t, int, const PointToPointOptions&) { return planned("send", {&t}); }
WorkPtr PlanningCommunicator::recv(Tensor& t, int, const PointToPointOptions&) { return planned("recv", {&t}); }
WorkPtr PlanningCommunicator::barrier(const BarrierOptions&) { refuse("barrier"); }

}  // namespace tidal::comm
