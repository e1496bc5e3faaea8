// The run configuration: every section of a tidal TOML file, with defaults. load_config()
// parses, applies `--set section.key=value` overrides and validates; a bad file or value is a
// tidal::Error naming the key (and the file), never a silent default.
#pragma once

#include "config/choices.h"
#include "models/model_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tidal::config {

// [model]: models/model_config.h (the families' keys live with the models).
using ModelConfig = models::ModelConfig;

struct DataConfig {
  DataKind kind = DataKind::markov;  // markov | tokens | indexed | text | chat | images
  std::string path;             // the data (data/dataset.h: shards, a prefix, a file, or a blend of them)
  std::string eval_path;        // token data to evaluate on; "" = held out from `path`
  std::uint64_t seed = 1;
  int markov_branching = 4;  // successors per state of the synthetic Markov language
  std::string tokenizer;     // a tokenizer.json: train.sample_every's prompt and samples as text; "" = none
  // false: sequences pack documents, attend only inside them, and restart positions at each
  // (data/token_dataset.h); true: a sequence is a window of the stream, whatever it spans.
  bool cross_document_attention = true;
  std::int64_t eod_id = -1;  // the end-of-text id that ends a document in token shards and text; -1 = none
  ChatFormat chat_template = ChatFormat::tokenizer;  // data.kind = "chat": how conversations render
};

struct TrainConfig {
  std::int64_t steps = 1000;
  std::int64_t batch_size = 32;        // global, in sequences
  std::int64_t micro_batch_size = 0;   // 0 = batch_size (no accumulation)
  double lr = 3e-3;
  double min_lr = 3e-4;
  std::int64_t warmup_steps = 50;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;  // 0 = off
  std::uint64_t seed = 1;
  Device::Kind device = Device::Kind::cpu;  // cpu | cuda: where the step computes
  DType precision = DType::f32;  // fp32 | bf16 | fp16 (load_config: bf16 when unset and device is cuda)
  bool fp8 = false;  // train.precision = "fp8": precision bf16, the linear layers' products in fp8
  double loss_scale = 65536.0;     // fp16: the first dynamic loss scale
  std::int64_t loss_scale_window = 1000;  // fp16: finite steps before it doubles
  std::int64_t eval_every = 200;   // 0 = only at the end
  std::int64_t eval_batches = 16;
  std::int64_t log_every = 50;     // plain progress lines when not on a terminal
  bool log_samples = false;        // each step's metrics name the global batch's samples (sample_ids)
  std::string tensorboard_dir;     // TensorBoard event files of the metrics go here; "" = none
  std::int64_t sample_every = 0;   // gpt: steps between greedy samples in the progress lines; 0 = off
  std::string sample_prompt;       // what the samples continue ("" = the end-of-text token)
  bool profile = false;            // time per op family and module kind, per step and in the summary
  // A step whose loss or gradient norm is not finite never updates the weights; stop ends the run
  // (exit 3), skip drops the step. Either way max_skipped_steps dropped in a row end it (fp16's
  // loss-scale backoffs count too).
  OnNonfinite on_nonfinite = OnNonfinite::stop;
  std::int64_t max_skipped_steps = 25;
  Recompute activation_checkpointing = Recompute::none;  // none | blocks | every_k | selective
  int activation_checkpointing_k = 2;             // every_k: blocks per checkpointed run
  ActivationOffload activation_offload = ActivationOffload::none;  // none | host: kept block inputs wait in host memory
  int loss_chunks = 1;  // gpt, bert, llama: the output layer and loss over this many blocks of positions
  ops::AttentionKernels attention = ops::AttentionKernels::automatic;  // auto | cudnn | own (GPU attention kernels)
};

struct TensorParallelConfig {
  int size = 1;
  parallel::TensorMode mode = parallel::TensorMode::d1;  // 1d | 2d | 2.5d | 3d
  int depth = 1;
  bool keep_gathered = false;  // 3d: gathered inputs kept for backward; 2.5d: whole weight blocks per depth layer
};

struct ParallelConfig {
  int data = 1;
  int expert = 1;  // data ranks that split each mixture of experts' experts (parallel::MeshSpec::expert)
  int pipeline = 1;
  int sequence = 1;
  // Ring positions zig-zag: rank r of N holds chunks r and 2N - 1 - r of the sequence's 2N, so
  // every rank does the same causal attention work (false: chunk r of N, contiguous).
  bool sequence_zigzag = true;
  parallel::SequenceMode sequence_mode = parallel::SequenceMode::ring;  // ring | ulysses
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::one_f_one_b;  // gpipe | 1f1b | interleaved | zb-h1 | zb-v
  int virtual_stages = 1;
  // zb-h1: the activation memory a stage may reach holding W's back, as a multiple of 1F1B's
  // largest stage's (pipeline::held_weight_gradients); 0: the paper's count, s W's on stage s
  double zb_memory = 1.05;
  pipeline::PartitionBy partition = pipeline::PartitionBy::layers;  // layers | parameters | time: what stages balance
  bool scatter_gather = true;         // pipeline x 1D tensor: send 1/t of each activation
  double bucket_mb = 25.0;   // data parallel: gradient bucket size (MiB) for the overlapped all-reduce
  double timeout_s = 300.0;  // a collective slower than this ends the job (the watchdog)
  GpuCollectives gpu_collectives = GpuCollectives::automatic;  // auto | nccl | staged
  int ranks_per_node = 0;    // 0 = as the launcher reports; keeps the busiest groups on one node
  // parallel.auto: tidal train picks data x pipeline x tensor x sequence and zero.stage by the cost
  // model (engine/planning/auto_layout.h) for the launched ranks, on parallel.hardware ("" = measure this
  // machine at start-up).
  bool auto_layout = false;
  std::string hardware;
  TensorParallelConfig tensor;
};

struct ZeroConfig {
  int stage = 0;
  memory::ChunkFetch fetch = memory::ChunkFetch::all_gather;  // all_gather | broadcast
};

struct MemoryConfig {
  Offload offload = Offload::none;  // none | chunk | static
  std::string device_limit;      // "" = no cap; bytes with a unit, e.g. "2GiB"
  std::string host_limit;        // "" = no cap: the chunks the host holds under offload
  std::string disk_dir;          // "" = no disk tier: where optimizer states beyond host_limit go
  std::string disk_limit;        // "" = no cap: the disk tier's optimizer states, each rank's
  std::int64_t chunk_size = 0;   // elements; 0 = searched
  memory::Eviction eviction = memory::Eviction::belady;  // belady | lru
  double warmup_fraction = 0.2;     // of the device tier the chunks may take in the warm-up
  bool embedding_on_host = false;   // the embedding layer's parameters and compute on the host CPU
};

struct CheckpointConfig {
  std::string dir;        // "" = no checkpoints
  std::int64_t every = 0;  // steps; 0 = only at the end (and at --stop-after)
  int keep = 2;
  Toggle async = Toggle::automatic;  // written in the background; auto = with more than one rank
  std::string buffer_size = "256MiB";  // each rank's staging buffer for writing device state
};

// [finetune]: how a pretrained model (model.init_from) is fine-tuned.
struct FinetuneConfig {
  FinetuneMethod method = FinetuneMethod::full;  // full | lora
  int lora_rank = 8;
  double lora_alpha = 16;   // the adapters' term scales by lora_alpha / lora_rank
  double lora_dropout = 0;  // on the adapters' input
  std::string lora_targets;  // Hugging Face module names, "q_proj,v_proj"; "" = PEFT's default for the family
  std::string adapters_from;  // a PEFT adapter directory to start the adapters from; "" = PEFT's init
  BaseDType base_dtype = BaseDType::compute;  // compute (train.precision) | nf4 (QLoRA)
  BaseOffload base_offload = BaseOffload::none;  // none (the device tier) | host (streamed to each module)
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  ZeroConfig zero;
  MemoryConfig memory;
  CheckpointConfig checkpoint;
  FinetuneConfig finetune;
};

// Reads `path` ("" = defaults only), applies overrides ("section.key=value", value in TOML
// syntax or a bare string), validates each key against this build. How the [parallel] sizes
// fit the launched ranks is checked by parallel::Layout.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);

// The same from TOML text (a checkpoint's stored config, whose [model] already holds what its
// model.init_from gave: the directory is not read again); `where` names it in errors.
Config load_config_text(const std::string& toml_text, const std::string& where);

// The [parallel] section's rules that hold on any machine (load_config checks them): the sizes,
// a ViT not split by position, pipeline schedules that can run over the model's block layers and
// micro-batches. The cost model's layouts and the planner's variants keep to them too. How the
// sizes fit the launched ranks is parallel::Layout's to check.
void check_layout(const Config& c);

// The whole configuration as TOML (what a run used; stored in checkpoints).
std::string to_toml(const Config& cfg);

// Parses sizes such as "512MiB", "2GB", "1048576" into bytes.
std::uint64_t parse_bytes(const std::string& text, const std::string& key);

}  // namespace tidal::config
