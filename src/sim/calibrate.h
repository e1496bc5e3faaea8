// `tidal calibrate`: measures the machine it runs on and describes it as a hardware file
// (sim/hardware.h) for the cost model. Every rank measures at once, as they compute during
// training, and an op's figure is the timing ranks' mean time; each figure is the median of
// three passes over all of them:
//   GEMM rates per dtype (ops::gemm on n x n x n products, each the median of several runs);
//   memory bandwidth (a copy of a large buffer: bytes read plus written per second);
//   the links, over the launched ranks of one node: a ping-pong between ranks 0 and 1 (half a
//   round trip: latency with a 4-byte message, bandwidth with a large one), and the ring
//   all-reduce's bus bandwidth over all ranks (2 (p - 1) / p bytes per byte reduced, as
//   nccl-tests reports it; latency from a 4-byte all-reduce over its 2 (p - 1) steps);
//   the disk a checkpoint writes to: a commit's fixed cost (a small file per rank, then rank 0's
//   metadata, renames and fsyncs), and saves of 64 MiB, 256 MiB and 1 GiB on the node, every rank
//   writing its share at once, fsynced, each after a pause (write caches drain between saves).
#pragma once

#include "comm/communicator.h"
#include "sim/hardware.h"

#include <string>

namespace tidal::sim {

struct CalibrateOptions {
  bool quick = false;  // smaller problems and fewer repeats: seconds, for tests
  std::string disk_dir = ".";  // where the disk's writes go (where checkpoints will)
};

// Collective over `world` (two ranks or more, on one node).
Hardware calibrate(comm::Communicator& world, const CalibrateOptions& options = {});

}  // namespace tidal::sim
