// A world as the cost model plans it: every rank's model, pipeline stages and chunk lists built
// by the code a run uses - the layer factory of its tensor mode, the model, the pipeline's
// partition, the chunk layout and PatrickStar's chunk-size search - under a planned
// ParallelContext (parallel/context.h) that knows each group's members and never communicates.
// Parameters are shapes until materialized, so a 7B model's world is planned in milliseconds and
// the model data it predicts is the bytes the run allocates, exactly (tests/mpi/check_plan.sh).
#pragma once

#include "config/choices.h"
#include "memory/chunk_layout.h"
#include "memory/chunk_manager.h"
#include "models/model.h"
#include "nn/layer_factory.h"
#include "parallel/context.h"
#include "pipeline/engine.h"
#include "sim/job.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace tidal::sim {

// One rank's model data (patrickstar-v2's term: parameters, gradients, optimizer states), by list.
struct ModelDataBytes {
  bool chunks = false;            // the chunk keeper; otherwise fp32 tensors (engine/model_data.h)
  std::int64_t parameters = 0;    // elements of the parameters this rank materializes
  std::int64_t chunk_elements = 0;
  std::int64_t param_chunk_bytes = 0;  // one chunk of the param list, in the compute precision
  std::int64_t chunks_in_lists = 0;  // chunks per list (every rank's, padding included)
  std::int64_t owned_elements = 0;   // the optimizer's chunks this rank keeps and updates (every list's)
  // The chunk keeper: this rank's share of the param list (in the compute precision) and of the
  // optimizer's lists (fp32 master copy, momentum, variance, the gradient sum). The tensor keeper:
  // the fp32 parameters and their gradients, and AdamW's two moments.
  std::int64_t param_bytes = 0, optimizer_bytes = 0;
  // The chunk keeper's param tier beyond its share during a step (memory/chunk_manager.cpp): a
  // chunk group packed for its reduction, and under ZeRO-3 the groups gathered around it (under
  // offload, only the other ranks' chunks of those groups, fetched into the device tier).
  std::int64_t param_transient_bytes = 0;
  // Under memory.offload: the host tier holds every list at the start, and after the warm-up the
  // optimizer states of each list's chunks (`bytes` each: master copy, momentum, variance, and
  // with micro-batches the gradient sum) move to the device in list order, the lists in the order
  // they joined the device tier's dynamic memory (the model's, then the experts'), while they fit
  // its margin; a chunk whose states stay on the host moves its param chunk (`param_bytes`) each
  // way each step.
  struct StateList {
    int chunks = 0;
    std::int64_t bytes = 0, param_bytes = 0;
    std::int64_t disk_bytes = 0;  // a chunk's states memory.disk_dir can take (master, momentum, variance)
  };
  bool offload = false, static_partition = false;
  std::int64_t offload_host_bytes = 0;
  std::vector<StateList> state_lists;
  int state_chunks() const;
  // memory.embedding_on_host: the embedding layer's lists, on the host.
  std::int64_t embedding_on_host_bytes = 0;
  // A frozen base under adapters (finetune.method = "lora"): its parameters in the compute
  // precision (its linears in NF4 under finetune.base_dtype = "nf4"), on the device tier beside the
  // lists, or on the host or disk under finetune.base_offload (each module's weights then in the
  // step's memory while it runs: the replayed activations count them).
  std::int64_t frozen_bytes = 0;
  config::BaseOffload frozen_on = config::BaseOffload::none;
  std::int64_t frozen_on_device() const { return frozen_on == config::BaseOffload::none ? frozen_bytes : 0; }
  std::int64_t frozen_on_host() const { return frozen_on == config::BaseOffload::host ? frozen_bytes : 0; }
  // The lists (what the run reports as model_data_bytes), and with the frozen base on the device.
  std::int64_t lists() const { return param_bytes + optimizer_bytes + embedding_on_host_bytes; }
  std::int64_t total() const { return lists() + frozen_on_device(); }
  // The param tier and the optimizer's lists at their peak.
  std::int64_t peak() const { return total() + param_transient_bytes; }
  nlohmann::json json() const;
};

// One of a rank's chunk lists on the device (engine/model_data.cpp's ChunkModelData): its
// parameters in segments, how they lie in chunks, and the ranks that share it - the chunk group,
// or for a mixture's experts under expert parallelism the data ranks holding the same experts.
struct PlannedChunkList {
  memory::ChunkParameters params;
  memory::ChunkLayout layout;
  parallel::GroupKind group;
};

// One rank of a planned world and what it was built from (kept alive together: the model's layers
// hold the layer factory and the context, the chunk parameters the context's groups). Ranks that
// differ only in their data or sequence index hold the same parameters: they share one model
// (built under the first such rank's context; the groups it names have the same members' shape).
struct PlannedRank {
  std::unique_ptr<parallel::ParallelContext> pc;
  // The context the model's layers were built under and issue their collectives on: pc, or the
  // first rank's with the same parameters (its groups have the same names and sizes).
  parallel::ParallelContext* model_pc = nullptr;
  std::shared_ptr<nn::LayerFactory> layers;
  std::shared_ptr<models::Model> model;
  std::shared_ptr<pipeline::PipelineEngine> engine;
  ModelDataBytes model_data;
  // The chunk keeper's device lists: the model's, then (parallel.expert) the experts'.
  std::vector<PlannedChunkList> chunk_lists;
};

// Every rank of `job`'s layout on `world_size` ranks (`ranks_per_node` per node, 0 = one node).
// `device_capacity`: the device tier's bytes, which bound the chunk size under memory.offload.
// parallel.partition = "time" measures the first micro-batch in a run; a plan balances the
// stages by parameters instead. Errors as a run's start-up gives them (tidal::Error naming keys).
std::vector<PlannedRank> plan_world(const Job& job, int world_size, int ranks_per_node,
                                    std::size_t device_capacity);

}  // namespace tidal::sim
