// The cost model (issue: predict before you run): for a job's model and layout on a world of
// ranks, each rank's peak memory by list and the step's time by term, from the planned world
// (sim/planned_world.h: model data exactly as a run lays it out), the replayed activations
// (sim/activations.h), and a hardware file's rates and links (sim/hardware.h).
//
// Step time from the same replay (sim/step_replay.h): each action's GEMM FLOPs at the device's
// rate for the precision, the bytes its new tensors write and read at the memory bandwidth, and
// its collectives' link bytes (comm/counting_communicator.h's formulas) over the link its group
// spans, with a latency per ring step; the pipeline's schedule simulated stage by stage with
// those action times (its bubble and waits; where the ranks oversubscribe a CPU's cores, a stage
// runs faster while fewer compute, sim/hardware.h); then the model data's collectives after
// backward, AdamW's pass over the lists, and the tensor keeper's bucketed all-reduce where it
// outlasts the last backward it overlaps (distributed/gradient_reducer.h); under memory.offload, the
// chunks' moves over the host link and AdamW on the host for the states there (RankMemory::Offload).
#pragma once

#include "sim/checkpoint_cost.h"
#include "sim/hardware.h"
#include "sim/job.h"
#include "sim/planned_world.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tidal::sim {

struct RankMemory {
  int rank = 0;
  ModelDataBytes model_data;
  double activations = 0;  // the activation pool's predicted peak
  // Each tier at its peak: the device (the computing device's memory; on a CPU without offload,
  // host memory, all of it) and the host beside it (under memory.offload, the chunk lists there;
  // memory.embedding_on_host's lists).
  double device = 0, host = 0;
  double disk = 0;  // memory.disk_dir's optimizer states (the host's less by as much, but for staging)
  double total() const { return device; }
  nlohmann::json traffic;  // the step's collectives (sim/traffic.h's json)
  // Under memory.offload, a step's chunk moves once the warm-up has placed the optimizer states
  // (memory/dynamic_memory.h): each param chunk whose states stay on the host goes there for
  // AdamW (its gradient) and comes back (the updated parameters); the static partition so moves
  // the whole param list. The dynamic partition also evicts param chunks where the param list and
  // the activations' peak overflow the device, each brought back at its next use.
  struct Offload {
    int device_state_chunks = 0, host_state_chunks = 0;
    int evictions = 0;         // predicted from the peak: exact where they all fall at it
    double bytes_each_way = 0;  // host to device, and as many device to host
  } offload;
};

// The busiest rank's step, by term (seconds).
struct StepTime {
  double compute = 0;        // GEMMs and attention's products at the device's rate
  double gemm = 0, attention = 0;  // compute's two parts
  double memory = 0;         // every tensor made, written and read once at the memory bandwidth
  double layer_comm = 0;     // the layers' collectives (tensor and sequence parallelism)
  double pipeline_wait = 0;  // the schedule's idle time (the bubble, waiting on transfers)
  double after = 0;          // the model data's collectives after backward (not hidden), the norm's
  double optimizer = 0;      // AdamW's pass over the rank's share of the lists (under offload, on the host where its states are)
  double offload = 0;        // memory.offload's chunk moves over the host link, not hidden
  double hidden = 0;         // the gradient reductions hidden behind backward (not in total)
  int rank = 0;              // the busiest rank
  double total() const { return compute + memory + layer_comm + pipeline_wait + after + optimizer + offload; }
  nlohmann::json json() const;
};

struct Prediction {
  nlohmann::json layout;        // the parallel.* (and zero.stage) keys this layout sets
  std::vector<RankMemory> ranks;
  int largest_rank = 0;         // the rank of the largest predicted peak
  double peak_bytes = 0;        // that peak
  // What the device must hold at the least, the neediest rank's: its peak, or under memory.offload
  // what the chunks' moves cannot shrink (the activations beside an operator's two param chunks,
  // or the static partition's whole param list).
  double needs_bytes = 0;
  StepTime time;
  double flops_per_step = 0;    // the model's training FLOPs (for MFU)
  bool fits = true;
  std::string does_not_fit;     // which tier, by how much
  std::string untimed;          // what the step time leaves out, and why ("": nothing)
  CheckpointCost checkpoint;    // a save's bytes and time (sim/checkpoint_cost.h)
  nlohmann::json json() const;
};

// The device memory one rank may use: memory.device_limit, else the hardware file's device; 0 =
// no bound (neither is given).
double capacity_of_device(const Job& job, const Hardware* hardware);

// `job`'s own layout on `world_size` ranks. `hardware` gives rates, links and the device's
// memory (without it: no time, and memory fits while within memory.device_limit if set).
Prediction predict(const Job& job, int world_size, const Hardware* hardware);

// ZB-H1's W's held back per stage under parallel.zb_memory (pipeline::held_weight_gradients),
// from `job`'s step replayed on `world_size` ranks as 1F1B and with each W right after its B;
// empty where the paper's count holds (another schedule, or parallel.zb_memory = 0). What a run
// holds (engine/trainer.cpp): every rank finds the same counts before the first step, and a
// rerun the same again. parallel.partition = "time" is replayed as "parameters" (the counts then
// of that split).
std::vector<int> zero_bubble_holds(const Job& job, int world_size);

// A layout (Prediction::layout) in a few words: "data 2 x pipeline 2 x 1d 2, zero 1".
std::string layout_words(const nlohmann::json& layout);

// The terms of one prediction, as lines (tidal plan --explain).
std::string explain(const Prediction& p, const Hardware* hardware);

}  // namespace tidal::sim
