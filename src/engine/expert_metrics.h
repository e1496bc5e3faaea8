// A step's routing (nn/moe.h: ExpertRecord) as the metrics' "moe" record: per MoE layer the rows
// each expert ran (max over mean), the picks dropped past capacity and the layer's router losses,
// over the whole global batch.
#pragma once

#include "nn/moe.h"
#include "parallel/context.h"

#include <nlohmann/json.hpp>

namespace tidal::engine {

// Collective over the world: every rank calls it with its own record. `n_layer` blocks of
// `experts` experts each.
nlohmann::json expert_metrics(const nn::ExpertRecord& record, parallel::ParallelContext& pc, int n_layer, int experts);

}  // namespace tidal::engine
