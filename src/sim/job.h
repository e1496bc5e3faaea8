// One training job as the cost model sees it: the model, the mesh it is split over and the run's
// choices, in the typed options the layers below take (DESIGN.md: config strings stop at the
// edge). engine/planning/job.h translates a Config into one; the planner there varies the
// Config's layout keys and translates each candidate.
#pragma once

#include "config/choices.h"
#include "core/device.h"
#include "core/dtype.h"
#include "data/data_options.h"
#include "memory/chunk_manager.h"
#include "models/lora.h"
#include "models/model_config.h"
#include "nn/activation_checkpoint.h"
#include "parallel/context.h"
#include "pipeline/partition_by.h"
#include "pipeline/schedule.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>

namespace tidal::sim {

struct Job {
  // The model, its activation checkpointing and its adapters (a frozen base under them: in NF4,
  // and where it lives).
  models::ModelConfig model;
  nn::CheckpointPolicy recompute;
  std::optional<models::LoraSpec> lora;
  bool nf4_base = false;
  config::BaseOffload base_offload = config::BaseOffload::none;
  // The mesh (its world size the plan's) and what it must fit: the model's shape, the global
  // batch and micro-batch (0 = no accumulation), the device.
  parallel::ContextOptions context;
  bool keep_gathered = false;  // a 2.5D / 3D split keeps its gathered weights
  // The pipeline.
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::one_f_one_b;
  int virtual_stages = 1;
  pipeline::PartitionBy partition = pipeline::PartitionBy::layers;
  bool scatter_gather = true;
  double zb_memory = 1.05;  // ZB-H1's W's held back within this factor of 1F1B's peak (0 = the paper's count)
  double bucket_mb = 25.0;  // the tensor keeper's gradient buckets
  data::DataOptions data;
  DType precision = DType::f32;
  std::uint64_t seed = 1;
  // The model data: in chunk lists (with these options), or fp32 tensors; memory.embedding_on_host's
  // lists.
  bool chunks = false;
  memory::ChunkOptions chunk_options;
  bool embedding_on_host = false;
  // The memory each rank may use (memory.device_limit, memory.host_limit; none: the hardware's).
  std::optional<double> device_limit, host_limit;
  // A checkpoint's save: in the background (auto: with more than one rank), every so many steps.
  config::Toggle checkpoint_async = config::Toggle::automatic;
  std::int64_t checkpoint_every = 0;
  // The layout's keys as a plan reports them (Prediction::layout).
  nlohmann::json layout = nlohmann::json::object();

  const parallel::MeshSpec& mesh() const { return context.mesh; }
  Device::Kind device() const { return context.on_gpu ? Device::Kind::cuda : Device::Kind::cpu; }
  // The chunk lists' options, micro-batches' gradients summed (`accumulate`) or not.
  memory::ChunkOptions chunk_options_for(bool accumulate) const {
    memory::ChunkOptions o = chunk_options;
    o.accumulate = accumulate;
    return o;
  }
  int zero_stage() const { return chunk_options.zero_stage; }
  bool offloaded() const { return chunk_options.offload.has_value(); }
  // A data rank's samples a step, and a micro-batch's.
  std::int64_t local_batch() const { return context.batch_size / context.mesh.data; }
  std::int64_t micro_batch() const { return context.micro_batch_size ? context.micro_batch_size : local_batch(); }
};

}  // namespace tidal::sim
