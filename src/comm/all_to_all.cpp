#include "comm/all_to_all.h"

#include "core/error.h"

namespace tidal::comm {

void all_to_all(Communicator& group, const std::vector<Tensor>& send, std::vector<Tensor>& recv, int tag) {
  const int N = group.size(), me = group.rank();
  TIDAL_ASSERT(int(send.size()) == N && int(recv.size()) == N, "all_to_all on group '{}' of {}: {} parts sent, {} received",
               group.name(), N, send.size(), recv.size());
  const PointToPointOptions options{.tag = tag};
  std::vector<WorkPtr> pending;
  // Receives first, then sends, each in the order of the distance around the group, so every
  // pair's transfers meet whatever order the transport matches them in.
  for (int step = 1; step < N; ++step) pending.push_back(group.recv(recv[(me - step + N) % N], (me - step + N) % N, options));
  for (int step = 1; step < N; ++step) pending.push_back(group.send(send[(me + step) % N], (me + step) % N, options));
  recv[me].copy_from(send[me]);
  for (const WorkPtr& w : pending) w->wait();
}

}  // namespace tidal::comm
