// What pipeline stages balance (parallel.partition): layers, parameters, or the measured time
// of each layer (stage_costs.h computes the costs).
#pragma once

namespace tidal::pipeline {

enum class PartitionBy { layers, parameters, time };

}  // namespace tidal::pipeline
