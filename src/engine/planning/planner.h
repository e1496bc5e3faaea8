// The planner (tidal plan --world N, parallel.auto): every layout the model splits over the ranks
// (layouts below), each predicted by the cost model (sim/cost_model.h) with the schedule and
// memory choices that run it fastest within memory, as a user tuning it by hand would set them:
//   - a pipeline's micro-batches where train.micro_batch_size is unset: p, 2p or 4p of them over
//     p stages (a smaller bubble against smaller products and more messages), the fastest;
//   - a pipeline's schedule where it is 1F1B (the default): that, ZB-H1 or ZB-V (the zero-bubble
//     schedules: W passes where 1F1B idles, at about its activations), the fastest;
//   - where a layout does not fit as configured: activation checkpointing (selective, then
//     blocks) and more micro-batches (gradient accumulation: activations of fewer samples at a
//     time), the fastest variant that fits, else the one nearest to fitting;
//   - where none of those fits either: the same with memory.offload = "chunk" (PatrickStar's
//     dynamic partition: the model data that does not fit on the host, its moves and the host's
//     AdamW timed), on a GPU whose hardware file gives the host's AdamW rate.
// A layout fits with 5% of the device left free (the cost model's accuracy on peaks; under
// offload, of what the device needs at the least). The choices it made are in the prediction's
// layout (train.micro_batch_size, train.activation_checkpointing, memory.offload) and its words.
#pragma once

#include "config/config.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"

#include <vector>

namespace tidal::engine {

struct PlannedLayout {
  config::Config cfg;     // the config that runs it: the layout's keys and the planner's choices
  sim::Prediction prediction;  // its predicted memory and time
};

// Every layout of `world_size` ranks with its choices, ranked: those that fit first, by predicted
// step time (by what the device needs without a hardware file: Prediction::needs_bytes), then
// those that do not, by what the device needs. The layouts are
// planned on OpenMP's count of threads, with the same result as on one.
std::vector<PlannedLayout> plan_layouts(const config::Config& cfg, int world_size, const sim::Hardware* hardware);

// Every layout of `world_size` ranks the model can be split over (data x pipeline x tensor mode
// and size x sequence x expert, each ZeRO stage where data > 1), as configs; invalid ones skipped.
std::vector<config::Config> layouts(const config::Config& cfg, int world_size);

// Whether the planner offers memory.offload on `hardware`: a GPU (a CPU's host memory is its
// device's) with the host's AdamW rate to time it (sim/hardware.h's host.optimizer_gbps).
bool offload_plannable(const sim::Hardware* hardware);

// Whether `a` ranks before `b` (the order above).
bool ranks_before(const sim::Prediction& a, const sim::Prediction& b, bool timed);

}  // namespace tidal::engine
