// Every rank's text gathered on every rank: for the few small exchanges that are not tensors (a
// checkpoint's plan of who writes what, each rank's report of the file it wrote).
//
// Invariant: every rank of the group calls it at the same point (two all-gathers: the lengths,
// then the bytes packed in int32, the communicators' integer type).
#pragma once

#include "comm/communicator.h"

#include <string>
#include <vector>

namespace tidal::comm {

// text of rank 0, 1, ... of `group`. `timeout`: zero = the communicator's default.
std::vector<std::string> all_gather_text(Communicator& group, const std::string& text, Seconds timeout = Seconds(0));

}  // namespace tidal::comm
