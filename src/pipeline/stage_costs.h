// What pipeline stages are cut from, and what each piece costs.
//
// Stages are made of units: one per block layer of the model (a transformer block, or a
// checkpointed run of blocks), the layers before the first block joined to the first unit and
// those after the last block to the last. So a stage boundary always falls just before a block
// layer, where the activation is the hidden state [B, T, C] (or the layout's shard of it): the
// one tensor every layout knows how to send, and the one 1D tensor parallelism can scatter and
// gather (colossal-ai.txt Fig. 7).
//
// A unit's cost, by parallel.partition:
//   "layers"     its transformer blocks (uniform, as Megatron-LM);
//   "parameters" the elements of the parameters its layers use: a tied embedding counts in the
//                lookup and again in the head, whose GEMM it is (DeepSpeed's "parameters");
//   "time"       its layers' forward + backward time, measured on the first micro-batch
//                (torchgpipe's balance by time): every rank measures, the slowest rank's time
//                counts, so all ranks cut the same stages.
#pragma once

#include "comm/communicator.h"
#include "models/model.h"
#include "pipeline/partition_by.h"

#include <string>
#include <vector>

namespace tidal::pipeline {


// [u_0 = 0, u_1, ..., u_n = layers().size()]: unit k is the model's layers [u_k, u_{k+1}).
std::vector<int> unit_bounds(const models::Model& model);

// For PartitionBy::time: a forward + backward of `state.batch` is timed (state.runner unused; the
// layers' parameters are materialized from state.seed for the measurement and released after).
// Collective: every rank of `world` calls it together.
struct TimeProbe {
  nn::StepState state;
  comm::Communicator* world = nullptr;
};

// The cost of each unit. `probe` is needed for PartitionBy::time only.
std::vector<double> unit_costs(models::Model& model, PartitionBy by, const TimeProbe* probe = nullptr);

}  // namespace tidal::pipeline
