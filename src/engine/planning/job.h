// The cost model on a Config: the one translation of a Config into the job sim/ plans
// (sim/job.h), and the prediction of a Config's own layout (tidal plan, parallel.auto, the
// trainer's ZB-H1 counts).
#pragma once

#include "config/config.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "sim/job.h"

namespace tidal::engine {

// `cfg` as the cost model takes it, its layout's keys in Job::layout.
sim::Job job_of(const config::Config& cfg);

// `cfg`'s own layout on `world_size` ranks (sim::predict of its job).
sim::Prediction predict(const config::Config& cfg, int world_size, const sim::Hardware* hardware);

// Whether a tensor split has the keep_gathered choice (a 2.5D grid with depth, a 3D cube).
bool keeps_gathered_choice(const config::TensorParallelConfig& t);

}  // namespace tidal::engine
