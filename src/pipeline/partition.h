// Stage partitioning: a sequence of units (pipeline/stage_costs.h: a model's block layers, the
// embedding joined to the first and the head to the last) split into contiguous runs, one per
// (virtual) pipeline stage, so that the most expensive stage is as cheap as possible (min-max
// by dynamic programming over the split points, then as even as it allows).
#pragma once

#include <vector>

namespace tidal::pipeline {

// Stage boundaries [b_0 = 0, b_1, ..., b_stages = costs.size()]: stage i runs units
// [b_i, b_{i+1}). Every stage holds at least one unit of positive cost; among the splits with
// the smallest maximum stage cost, the most even (least sum of squared stage costs) is taken,
// and of those the one that puts cost earliest. A tidal::Error if there are fewer positive-cost
// units than stages.
std::vector<int> partition(const std::vector<double>& costs, int stages);

}  // namespace tidal::pipeline
