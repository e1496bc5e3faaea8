// One rank's training step replayed (the cost model's measure of a layout): the rank's real
// modules (the planned world's, sim/planned_world.h) run forward and backward on meta tensors
// (core/device.h) for every micro-batch in the order the pipeline schedule runs them
// (pipeline/schedule.h), so the tensors a step makes, what its layers save for backward and when
// each is let go, the ops' workspaces and the collectives its layers issue are the code's own;
// then what the pipeline engine, the trainer and the model data keeper add for the step. Memory
// is tallied in a pool as the trainer's activation pool counts it (engine/trainer.cpp gives the
// pool a step's tensors and temporaries alone); the traffic as the counting communicator records
// it (sim/traffic.h). tests/sim/check_cost_model.py holds both against runs.
#pragma once

#include "sim/hardware.h"
#include "sim/job.h"
#include "sim/planned_world.h"
#include "sim/traffic.h"

#include <optional>
#include <vector>

namespace tidal::sim {

// What the ops do on the device beyond the layers' own tensors.
struct DeviceOps {
  bool cpu = true;          // ops/cpu/ (else the CUDA kernels)
  bool bf16_native = true;  // bf16 GEMM and attention operands as they are (else fp32 copies)
};

// What the step's work costs on the machine planned for (sim/hardware.h): a GEMM at the rate of
// its size for the precision, attention's products at attention's rate, every tensor made
// written once and read once at the elementwise ops' rate, a collective at its link's latency
// and bandwidth, AdamW at the optimizer's rate.
struct Costs {
  const Hardware* hardware = nullptr;
  DType dtype = DType::f32;
  LinkTime link;
};

// One action of the schedule on this rank and its seconds (its layers' collectives included:
// `comm` of them).
struct ActionTime {
  bool forward = true;
  bool weight = false;  // a W pass (zero-bubble schedules): waits for its own B only, and nothing waits for it
  int micro_batch = 0, chunk = 0;
  double seconds = 0, comm = 0;
};

// The order a replay runs: the configured schedule, or one of the two from which ZB-H1's counts
// come (a plain 1F1B, and each W right after its B: sim::zero_bubble_holds), and the W's each
// stage holds back.
struct ReplayOrder {
  std::optional<pipeline::ScheduleKind> kind;  // else the job's schedule
  int held_weight_gradients = -1;              // pipeline::schedule's
};

struct StepReplay {
  double peak_bytes = 0;            // the activation pool's peak over the step
  double held_weight_bytes = 0;     // the most one W let go (what a held W keeps)
  double kept_per_micro_batch = 0;  // what one micro-batch's forward leaves for its backward
  Traffic traffic;                  // the step's collectives on this rank
  // With costs: the schedule's actions in order, what the step adds after them (the model data's
  // collectives, the gradient norm, the optimizer's pass over its lists), and the split of the
  // actions' time.
  std::vector<ActionTime> actions;
  // overlappable: the gradient reductions that run beside backward (the tensor keeper's buckets,
  // the chunk keeper's groups), overlap_tail the share of them that starts only once backward's
  // last op is done (the last bucket, whose parameters backward completes last; the last of the
  // chunk keeper's groups, one in flight at a time), overlap_passes the backwards they are spread
  // over in equal parts (each micro-batch's at ZeRO-2 and 3; else the last).
  double after_actions = 0, overlappable = 0, overlap_tail = 0;
  int overlap_passes = 1;
  double optimizer = 0;
  double gemm_seconds = 0, attention_seconds = 0, memory_seconds = 0, layer_comm_seconds = 0;
};

StepReplay replay_step(const Job& job, const PlannedRank& rank, const DeviceOps& ops,
                       const Costs* costs = nullptr, const ReplayOrder& order = {});

}  // namespace tidal::sim
