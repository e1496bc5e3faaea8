#include "comm/self_communicator.h"

#include "core/error.h"

namespace tidal::comm {
namespace {

WorkPtr done() {
  auto w = std::make_shared<Work>();
  w->mark_completed();
  return w;
}

}  // namespace

WorkPtr SelfCommunicator::all_reduce(Tensor&, const AllReduceOptions&) { return done(); }

WorkPtr SelfCommunicator::broadcast(Tensor&, const BroadcastOptions& o) {
  TIDAL_CHECK(o.root == 0, "broadcast on group '{}' of one rank: root {} does not exist", name_, o.root);
  return done();
}

WorkPtr SelfCommunicator::reduce(Tensor&, const ReduceOptions& o) {
  TIDAL_CHECK(o.root == 0, "reduce on group '{}' of one rank: root {} does not exist", name_, o.root);
  return done();
}

WorkPtr SelfCommunicator::all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& o) {
  gather_counts(*this, o.counts, in.numel(), out.numel(), "all_gather");
  if (out.raw() != in.raw()) out.reshape(in.shape()).copy_from(in);
  return done();
}

WorkPtr SelfCommunicator::reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& o) {
  gather_counts(*this, o.counts, out.numel(), in.numel(), "reduce_scatter");
  if (out.raw() != in.raw()) out.reshape(in.shape()).copy_from(in);
  return done();
}

WorkPtr SelfCommunicator::send(const Tensor&, int dst, const PointToPointOptions&) {
  throw Error(fmt::format("send to rank {} on group '{}' of one rank: there is no peer", dst, name_));
}

WorkPtr SelfCommunicator::recv(Tensor&, int src, const PointToPointOptions&) {
  throw Error(fmt::format("recv from rank {} on group '{}' of one rank: there is no peer", src, name_));
}

WorkPtr SelfCommunicator::barrier(const BarrierOptions&) { return done(); }

}  // namespace tidal::comm
