// The one translation of a Config into the typed options of the layers below it: the mesh and
// what it must fit (parallel), the data (data), the activation checkpointing of blocks (nn), the
// chunk lists (memory), the adapters (models).
// Nothing below config/ sees a Config; the model's [model] section is the models' own struct.
#pragma once

#include "config/config.h"
#include "data/data_options.h"
#include "memory/chunk_manager.h"
#include "models/lora.h"
#include "nn/activation_checkpoint.h"
#include "parallel/context.h"

#include <optional>

namespace tidal::config {

// The ParallelContext of `cfg`: [parallel]'s mesh (its world size the launched or planned one's),
// the model's shape and the batch it must fit, and how GPU ranks communicate.
parallel::ContextOptions context_options(const Config& cfg);
// The mesh of `cfg` on `world_size` ranks, `ranks_per_node` on a node (0 = unknown) unless
// parallel.ranks_per_node says.
parallel::MeshSpec mesh_spec(const Config& cfg, int world_size, int ranks_per_node);

// The data of `cfg`: [data] with the model's objective (its family's task) and shapes.
data::DataOptions data_options(const Config& cfg);

// The activation checkpointing train.activation_checkpointing, train.activation_offload and
// train.loss_chunks ask for.
nn::CheckpointPolicy checkpoint_policy(const TrainConfig& tc);

// Whether `cfg`'s model data lives in chunk lists (bf16 / fp16, ZeRO, offload) rather than fp32
// tensors: the keeper engine::make_model_data picks.
bool keeps_chunks(const Config& cfg);
// The chunk manager's options for `cfg` (without the communication group): memory.chunk_size,
// the precision, zero.*, and memory.offload's; `accumulate`: micro-batches summed.
memory::ChunkOptions chunk_options(const Config& cfg, bool accumulate);

// The low-rank adapters of [finetune] (models/lora.h); none under finetune.method = "full".
std::optional<models::LoraSpec> lora_spec(const Config& cfg);
}  // namespace tidal::config
