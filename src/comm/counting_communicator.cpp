#include "comm/counting_communicator.h"

namespace tidal::comm {

WorkPtr CountingCommunicator::record(const char* kind, std::int64_t elements, double bytes_sent, double link_bytes,
                                     WorkPtr work) {
  {
    std::lock_guard lock(mutex_);
    OperationStats& s = stats_[kind];
    ++s.calls;
    s.elements += elements;
    s.bytes_sent += bytes_sent;
    s.link_bytes += link_bytes;
  }
  const std::string key = kind;
  work->on_completion([this, key](const Work& w) {
    std::lock_guard lock(mutex_);
    stats_[key].seconds += std::chrono::duration<double>(w.completed_at() - w.issued_at()).count();
  });
  return work;
}

WorkPtr CountingCommunicator::all_reduce(Tensor& t, const AllReduceOptions& options) {
  const double p = size(), both = 2.0 * (p - 1) / p * double(t.nbytes());
  return record("all_reduce", t.numel(), both, both, inner_->all_reduce(t, options));
}

WorkPtr CountingCommunicator::broadcast(Tensor& t, const BroadcastOptions& options) {
  const double p = size(), sent = rank() == options.root && p > 1 ? double(t.nbytes()) : 0.0;
  return record("broadcast", t.numel(), sent, 2.0 * (p - 1) / p * double(t.nbytes()), inner_->broadcast(t, options));
}

WorkPtr CountingCommunicator::reduce(Tensor& t, const ReduceOptions& options) {
  const double p = size(), sent = rank() == options.root ? 0.0 : double(t.nbytes());
  return record("reduce", t.numel(), sent, 2.0 * (p - 1) / p * double(t.nbytes()), inner_->reduce(t, options));
}

WorkPtr CountingCommunicator::all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options) {
  const double p = size(), both = (p - 1) / p * double(out.nbytes());
  return record("all_gather", in.numel(), both, both, inner_->all_gather(out, in, options));
}

WorkPtr CountingCommunicator::reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options) {
  const double p = size(), both = (p - 1) / p * double(in.nbytes());
  return record("reduce_scatter", in.numel(), both, both, inner_->reduce_scatter(out, in, options));
}

WorkPtr CountingCommunicator::send(const Tensor& t, int dst, const PointToPointOptions& options) {
  return record("send", t.numel(), double(t.nbytes()), double(t.nbytes()), inner_->send(t, dst, options));
}

WorkPtr CountingCommunicator::recv(Tensor& t, int src, const PointToPointOptions& options) {
  return record("recv", t.numel(), 0.0, 0.0, inner_->recv(t, src, options));
}

WorkPtr CountingCommunicator::barrier(const BarrierOptions& options) {
  return record("barrier", 0, 0.0, 0.0, inner_->barrier(options));
}

std::map<std::string, OperationStats> CountingCommunicator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CountingCommunicator::reset() {
  std::lock_guard lock(mutex_);
  stats_.clear();
}

}  // namespace tidal::comm
