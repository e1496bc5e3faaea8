#include "engine/planning/job.h"

#include "config/options.h"

#include <string>

namespace tidal::engine {

bool keeps_gathered_choice(const config::TensorParallelConfig& t) {
  return t.size > 1 && (t.mode == parallel::TensorMode::d3 || (t.mode == parallel::TensorMode::d2p5 && t.depth > 1));
}

namespace {

// The layout's keys as the plan reports them (the ones that are not at their one value).
nlohmann::json layout_of(const config::Config& cfg) {
  const config::ParallelConfig& par = cfg.parallel;
  nlohmann::json layout = {{"parallel.data", par.data},
                           {"parallel.pipeline", par.pipeline},
                           {"parallel.tensor.size", par.tensor.size},
                           {"parallel.tensor.mode", std::string(config::name_of(par.tensor.mode))},
                           {"parallel.sequence", par.sequence},
                           {"zero.stage", cfg.zero.stage}};
  if (par.tensor.mode == parallel::TensorMode::d2p5) layout["parallel.tensor.depth"] = par.tensor.depth;
  if (keeps_gathered_choice(par.tensor)) layout["parallel.tensor.keep_gathered"] = par.tensor.keep_gathered;
  if (par.sequence > 1) layout["parallel.sequence_mode"] = std::string(config::name_of(par.sequence_mode));
  if (par.expert > 1) layout["parallel.expert"] = par.expert;
  return layout;
}

std::optional<double> bytes_of(const std::string& value, const char* key) {
  return value.empty() ? std::nullopt : std::optional(double(config::parse_bytes(value, key)));
}

}  // namespace

sim::Job job_of(const config::Config& cfg) {
  const config::ParallelConfig& par = cfg.parallel;
  return {.model = cfg.model,
          .recompute = config::checkpoint_policy(cfg.train),
          .lora = config::lora_spec(cfg),
          .nf4_base = cfg.finetune.base_dtype == config::BaseDType::nf4,
          .base_offload = cfg.finetune.base_offload,
          .context = config::context_options(cfg),
          .keep_gathered = par.tensor.keep_gathered,
          .schedule = par.schedule,
          .virtual_stages = par.virtual_stages,
          .partition = par.partition,
          .scatter_gather = par.scatter_gather,
          .zb_memory = par.zb_memory,
          .bucket_mb = par.bucket_mb,
          .data = config::data_options(cfg),
          .precision = cfg.train.precision,
          .seed = cfg.train.seed,
          .chunks = config::keeps_chunks(cfg),
          .chunk_options = config::chunk_options(cfg, false),
          .embedding_on_host = cfg.memory.embedding_on_host,
          .device_limit = bytes_of(cfg.memory.device_limit, "memory.device_limit"),
          .host_limit = bytes_of(cfg.memory.host_limit, "memory.host_limit"),
          .checkpoint_async = cfg.checkpoint.async,
          .checkpoint_every = cfg.checkpoint.every,
          .layout = layout_of(cfg)};
}

sim::Prediction predict(const config::Config& cfg, int world_size, const sim::Hardware* hardware) {
  return sim::predict(job_of(cfg), world_size, hardware);
}

}  // namespace tidal::engine
