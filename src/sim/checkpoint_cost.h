// A checkpoint's save as the cost model predicts it (engine/checkpoint/checkpointer.h): what each
// rank writes - its share of the blocks of fp32 state (weight, momentum, variance) under the same
// plan a save makes (io/save_plan.h) from the same holdings (a ZeRO owner's chunks, a replica's
// whole blocks) - what it stages in host memory first, and the time: the slowest node's disk
// taking every rank's file at once and the commit (hardware [disk]), and what of it the step
// stands waiting for.
//
// A synchronous save stalls the step for its write and commit. An asynchronous one stalls it for
// the snapshot (state in device memory copied to host staging: over the host link on a GPU, a
// copy on a CPU), and for the part of the files' write that outlasts the next forward and
// backward where state is read in place (host memory, until the next optimizer update), or of
// the write and its commit that outlasts the steps until the next save where everything was
// staged; the commit itself runs beside training, on the writer's thread.
#pragma once

#include "sim/hardware.h"
#include "sim/job.h"
#include "sim/planned_world.h"

#include <nlohmann/json.hpp>

#include <vector>

namespace tidal::sim {

struct CheckpointCost {
  std::vector<double> bytes;    // per rank: its file (0: it owns nothing)
  std::vector<double> staging;  // per rank: host staging of an asynchronous save
  bool async = false;           // what checkpoint.async gives on this world
  bool in_place = false;        // an asynchronous save reads some state where it lies
  // Seconds (0 without [disk] in the hardware file): the slowest node's write, and the stall of
  // a synchronous and of an asynchronous save.
  double write = 0, sync_stall = 0, async_stall = 0;
  double stall() const { return async ? async_stall : sync_stall; }
  nlohmann::json json() const;
};

// `step`: the predicted step's seconds, of which `optimizer` the update (an asynchronous save
// overlaps the rest: the next step's forward and backward).
CheckpointCost checkpoint_cost(const Job& job, const std::vector<PlannedRank>& world,
                               const std::vector<double>& device_state_fraction, const Hardware* hardware, double step,
                               double optimizer);

}  // namespace tidal::sim
