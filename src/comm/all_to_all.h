// All-to-all over point-to-point transfers: rank r sends send[j] to every rank j and receives
// recv[s] from every rank s, its own part copied locally. (N - 1) / N of each rank's data crosses
// a link, as with MPI_Alltoall; built from send / recv, it runs on every Communicator
// (and CountingCommunicator counts it as N - 1 sends).
//
// Invariants: every rank of the group calls it at the same point with parts of matching shapes
// (send[j] on rank r has recv[r]'s shape on rank j); `tag` keeps it apart from other
// point-to-point streams of the group.
#pragma once

#include "comm/communicator.h"

#include <vector>

namespace tidal::comm {

void all_to_all(Communicator& group, const std::vector<Tensor>& send, std::vector<Tensor>& recv, int tag);

}  // namespace tidal::comm
