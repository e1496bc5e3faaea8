#include "comm/device_communicator.h"

namespace tidal::comm {

Communicator& DeviceCommunicator::over(std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    if (!on_device_(*t)) return *staged_;
  return *device_;
}

WorkPtr DeviceCommunicator::all_reduce(Tensor& t, const AllReduceOptions& options) {
  return over({&t}).all_reduce(t, options);
}

WorkPtr DeviceCommunicator::broadcast(Tensor& t, const BroadcastOptions& options) {
  return over({&t}).broadcast(t, options);
}

WorkPtr DeviceCommunicator::reduce(Tensor& t, const ReduceOptions& options) { return over({&t}).reduce(t, options); }

WorkPtr DeviceCommunicator::all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options) {
  return over({&out, &in}).all_gather(out, in, options);
}

WorkPtr DeviceCommunicator::reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options) {
  return over({&out, &in}).reduce_scatter(out, in, options);
}

WorkPtr DeviceCommunicator::send(const Tensor& t, int dst, const PointToPointOptions& options) {
  return staged_->send(t, dst, options);
}

WorkPtr DeviceCommunicator::recv(Tensor& t, int src, const PointToPointOptions& options) {
  return staged_->recv(t, src, options);
}

WorkPtr DeviceCommunicator::barrier(const BarrierOptions& options) { return staged_->barrier(options); }

}  // namespace tidal::comm
