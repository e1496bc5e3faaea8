#include "config/options.h"

#include "models/registry.h"

namespace tidal::config {

parallel::ContextOptions context_options(const Config& cfg) {
  const ParallelConfig& p = cfg.parallel;
  const ModelConfig& m = cfg.model;
  const models::ModelTraits traits = models::model_traits(m);
  const bool unbounded = cfg.memory.offload != Offload::none && cfg.memory.device_limit.empty();
  return {.mesh = {.world_size = 1,
                   .data = p.data,
                   .pipeline = p.pipeline,
                   .tensor = p.tensor.size,
                   .sequence = p.sequence,
                   .expert = p.expert,
                   .sequence_zigzag = p.sequence_zigzag,
                   .sequence_mode = p.sequence_mode,
                   .mode = p.tensor.mode,
                   .depth = p.tensor.depth,
                   .ranks_per_node = p.ranks_per_node},
          .n_layer = m.n_layer,
          .n_head = m.n_head,
          .n_kv_head = traits.n_kv_head,
          .n_embd = m.n_embd,
          .seq_len = m.seq_len,
          .num_classes = traits.classes,
          .batch_size = cfg.train.batch_size,
          .micro_batch_size = cfg.train.micro_batch_size,
          .timeout_s = p.timeout_s,
          .on_gpu = cfg.train.device == Device::Kind::cuda,
          .gpu_collectives = p.gpu_collectives,
          .offload_without_limit = unbounded ? std::string(name_of(cfg.memory.offload)) : std::string()};
}

parallel::MeshSpec mesh_spec(const Config& cfg, int world_size, int ranks_per_node) {
  return parallel::mesh_spec(context_options(cfg), world_size, ranks_per_node);
}

data::DataOptions data_options(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  const DataConfig& d = cfg.data;
  const bool masked = models::find_family(m.type).task == models::ModelTask::masked_lm;
  const models::ModelTraits traits = models::model_traits(m);
  return {.kind = d.kind,
          .path = d.path,
          .eval_path = d.eval_path,
          .seed = d.seed,
          .markov_branching = d.markov_branching,
          .packing = {.documents = !d.cross_document_attention || d.kind == DataKind::chat,
                      .eod_id = std::int32_t(d.eod_id)},
          .chat = {.tokenizer = d.tokenizer,
                   .chat_template = d.chat_template == ChatFormat::chatml   ? std::optional(data::ChatTemplate::chatml)
                                    : d.chat_template == ChatFormat::llama3 ? std::optional(data::ChatTemplate::llama3)
                                                                            : std::nullopt},
          .objective = masked ? data::Objective::masked : data::Objective::causal,
          .seq_len = m.seq_len,
          .vocab_size = m.vocab_size,
          .images = {traits.channels, traits.image_size, traits.image_size, traits.classes}};
}

nn::CheckpointPolicy checkpoint_policy(const TrainConfig& tc) {
  const int every = tc.activation_checkpointing == Recompute::blocks    ? 1
                    : tc.activation_checkpointing == Recompute::every_k ? tc.activation_checkpointing_k
                                                                        : 0;
  return {.every = every,
          .offload_to_host = tc.activation_offload == ActivationOffload::host,
          .selective = tc.activation_checkpointing == Recompute::selective,
          .loss_chunks = tc.loss_chunks};
}

bool keeps_chunks(const Config& cfg) {
  return !(cfg.zero.stage == 0 && cfg.train.precision == DType::f32 && cfg.memory.offload == Offload::none);
}

memory::ChunkOptions chunk_options(const Config& cfg, bool accumulate) {
  memory::ChunkOptions o{.chunk_elements = cfg.memory.chunk_size,
                         .compute_dtype = cfg.train.precision,
                         .accumulate = accumulate,
                         .zero_stage = cfg.zero.stage,
                         .fetch = cfg.zero.fetch};
  if (cfg.memory.offload != Offload::none)
    o.offload = memory::OffloadOptions{
        .partition = cfg.memory.offload == Offload::static_split ? memory::Partition::fixed
                                                                 : memory::Partition::dynamic,
        .eviction = cfg.memory.eviction,
        .warmup_fraction = cfg.memory.warmup_fraction,
        .disk_dir = cfg.memory.disk_dir,
        .disk_limit = cfg.memory.disk_limit.empty()
                          ? 0
                          : std::int64_t(parse_bytes(cfg.memory.disk_limit, "memory.disk_limit"))};
  return o;
}

std::optional<models::LoraSpec> lora_spec(const Config& cfg) {
  const FinetuneConfig& f = cfg.finetune;
  if (f.method != FinetuneMethod::lora) return std::nullopt;
  return models::LoraSpec{
      .targets = models::lora_targets(cfg.model, f.lora_targets),
      .options = {.rank = f.lora_rank, .alpha = float(f.lora_alpha), .dropout = float(f.lora_dropout)}};
}

}  // namespace tidal::config
