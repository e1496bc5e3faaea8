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

Volume volume(std::string_view op, int p, double nbytes, bool root) {
  const double spread = 2.0 * (p - 1) / p * nbytes, share = double(p - 1) / p * nbytes;
  if (op == "all_reduce") return {spread, spread};
  if (op == "broadcast") return {root && p > 1 ? nbytes : 0.0, spread};
  if (op == "reduce") return {root ? 0.0 : nbytes, spread};
  if (op == "all_gather" || op == "reduce_scatter") return {share, share};
  if (op == "send") return {nbytes, nbytes};
  return {};  // recv (the transfer counts at its send), barrier
}

WorkPtr CountingCommunicator::all_reduce(Tensor& t, const AllReduceOptions& options) {
  const Volume v = volume("all_reduce", size(), double(t.nbytes()));
  return record("all_reduce", t.numel(), v.bytes_sent, v.link_bytes, inner_->all_reduce(t, options));
}

WorkPtr CountingCommunicator::broadcast(Tensor& t, const BroadcastOptions& options) {
  const Volume v = volume("broadcast", size(), double(t.nbytes()), rank() == options.root);
  return record("broadcast", t.numel(), v.bytes_sent, v.link_bytes, inner_->broadcast(t, options));
}

WorkPtr CountingCommunicator::reduce(Tensor& t, const ReduceOptions& options) {
  const Volume v = volume("reduce", size(), double(t.nbytes()), rank() == options.root);
  return record("reduce", t.numel(), v.bytes_sent, v.link_bytes, inner_->reduce(t, options));
}

WorkPtr CountingCommunicator::all_gather(Tensor& out, const Tensor& in, const AllGatherOptions& options) {
  const Volume v = volume("all_gather", size(), double(out.nbytes()));
  return record("all_gather", in.numel(), v.bytes_sent, v.link_bytes, inner_->all_gather(out, in, options));
}

WorkPtr CountingCommunicator::reduce_scatter(Tensor& out, const Tensor& in, const ReduceScatterOptions& options) {
  const Volume v = volume("reduce_scatter", size(), double(in.nbytes()));
  return record("reduce_scatter", in.numel(), v.bytes_sent, v.link_bytes, inner_->reduce_scatter(out, in, options));
}

WorkPtr CountingCommunicator::send(const Tensor& t, int dst, const PointToPointOptions& options) {
  const Volume v = volume("send", size(), double(t.nbytes()));
  return record("send", t.numel(), v.bytes_sent, v.link_bytes, inner_->send(t, dst, options));
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
