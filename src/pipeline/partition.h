// Stage partitioning: a model's layers (embedding, blocks, head, loss) split into contiguous
// runs, one per (virtual) pipeline stage, so that the most expensive stage is as cheap as
// possible. The first layer (the embedding) lands on the first stage and the last (the loss,
// after the head) on the last, by contiguity. The cost of a layer is 1 per transformer block
// (parallel.partition = "layers"), its parameter count ("parameters"), or its measured
// forward + backward time ("time").
#pragma once

#include <vector>

namespace tidal::pipeline {

// Stage boundaries [b_0 = 0, b_1, ..., b_stages = costs.size()]: stage i runs layers
// [b_i, b_{i+1}). Every stage holds at least one layer of positive cost; among the splits with
// the smallest maximum stage cost, the one that puts cost earliest is taken. A tidal::Error if
// there are fewer positive-cost layers than stages.
std::vector<int> partition(const std::vector<double>& costs, int stages);

}  // namespace tidal::pipeline
