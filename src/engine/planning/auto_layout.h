// parallel.auto: the layout tidal train runs under, chosen by the cost model (sim/cost_model.h, through engine/planning/planner.h)
// for the launched ranks: every layout the model splits over them, predicted on the machine
// (parallel.hardware, or this one measured at start-up), the fastest predicted step among those
// that fit. Every rank chooses alike (the same predictions from the same figures).
#pragma once

#include "comm/communicator.h"
#include "config/config.h"

#include <string>

namespace tidal::engine {

struct AutoLayout {
  config::Config cfg;  // the config with the chosen parallel.* keys and zero.stage
  std::string why;     // what was chosen and why, for the progress output
};

// `world`: the launched ranks (null for one process): measures the machine over them when
// parallel.hardware is "". A tidal::Error when no layout fits, naming the nearest and what it
// lacks.
AutoLayout choose_layout(const config::Config& cfg, int world_size, comm::Communicator* world);

}  // namespace tidal::engine
