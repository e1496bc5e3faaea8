// The planner (tidal plan --world N, parallel.auto): every layout the model splits over the ranks
// (sim/cost_model.h's layouts), each predicted with the schedule and memory choices that run it
// fastest within memory, as a user tuning it by hand would set them:
//   - a pipeline's micro-batches where train.micro_batch_size is unset: p, 2p or 4p of them over
//     p stages (a smaller bubble against smaller products and more messages), the fastest;
//   - where a layout does not fit as configured: activation checkpointing (selective, then
//     blocks) and more micro-batches (gradient accumulation: activations of fewer samples at a
//     time), the fastest variant that fits, else the one nearest to fitting.
// A layout fits with 5% of the device left free (the cost model's accuracy on peaks).
// The choices it made are in the prediction's layout (train.micro_batch_size,
// train.activation_checkpointing) and its words. Offload is not among them: the cost model does
// not time the chunks' moves between host and device yet, so it could not rank it.
#pragma once

#include "config/config.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"

#include <vector>

namespace tidal::sim {

struct PlannedLayout {
  config::Config cfg;     // the config that runs it: the layout's keys and the planner's choices
  Prediction prediction;  // its predicted memory and time
};

// Every layout of `world_size` ranks with its choices, ranked: those that fit first, by predicted
// step time (by peak without a hardware file), then those that do not, by peak. The layouts are
// planned on OpenMP's count of threads, with the same result as on one.
std::vector<PlannedLayout> plan_layouts(const config::Config& cfg, int world_size, const Hardware* hardware);

// Whether `a` ranks before `b` (the order above).
bool ranks_before(const Prediction& a, const Prediction& b, bool timed);

}  // namespace tidal::sim
