#include "config/schema.h"

#include "core/error.h"
#include "models/registry.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <mutex>
#include <type_traits>
#include <utility>

namespace tidal::config {
namespace {

// A key whose value lives at access(config); an integer's least value is `least` (0 unless a key
// keeps -1 for "none").
template <class Access>
Key field(std::string name, Access access, std::string help, std::int64_t least = 0) {
  using F = std::remove_cvref_t<decltype(access(std::declval<Config&>()))>;
  Key k;
  k.name = std::move(name);
  k.help = std::move(help);
  if constexpr (Choice<F>) {  // a name on the way in and out, the enum inside
    k.type = Key::Type::string;
    k.boolean_names = parse_choice<F>("true").has_value() && parse_choice<F>("false").has_value();
    k.set = [=, n = k.name](Config& c, const Value& v) {
      const std::string name = std::holds_alternative<bool>(v) ? (std::get<bool>(v) ? "true" : "false")
                                                               : std::get<std::string>(v);
      const std::optional<F> value = parse_choice<F>(name);
      TIDAL_CHECK(value.has_value(), "{} = \"{}\" is not one of {}", n, name, choice_names<F>());
      access(c) = *value;
    };
    k.get = [=](const Config& c) { return Value(std::string(name_of(access(const_cast<Config&>(c))))); };
  } else if constexpr (std::is_same_v<F, std::string>) {
    k.type = Key::Type::string;
    k.set = [=](Config& c, const Value& v) { access(c) = std::get<std::string>(v); };
    k.get = [=](const Config& c) { return Value(access(const_cast<Config&>(c))); };
  } else if constexpr (std::is_same_v<F, bool>) {
    k.type = Key::Type::boolean;
    k.set = [=](Config& c, const Value& v) { access(c) = std::get<bool>(v); };
    k.get = [=](const Config& c) { return Value(access(const_cast<Config&>(c))); };
  } else if constexpr (std::is_floating_point_v<F>) {
    k.type = Key::Type::number;
    k.set = [=, n = k.name](Config& c, const Value& v) {
      const double x = std::get<double>(v);
      TIDAL_CHECK(std::isfinite(x), "{} must be a finite number, got {}", n, x);
      access(c) = F(x);
    };
    k.get = [=](const Config& c) { return Value(double(access(const_cast<Config&>(c)))); };
  } else {
    k.type = Key::Type::integer;
    k.set = [=, n = k.name](Config& c, const Value& v) {
      const std::int64_t x = std::get<std::int64_t>(v);
      TIDAL_CHECK(x >= least, "{} must not be {}, got {}", n, least == 0 ? "negative" : fmt::format("below {}", least),
                  x);
      access(c) = F(x);
    };
    k.get = [=](const Config& c) { return Value(std::int64_t(access(const_cast<Config&>(c)))); };
  }
  return k;
}

// train.precision: a storage type, or fp8 (bf16 storage, the linear layers' products in fp8).
Key precision_key() {
  Key k = field("train.precision", [](Config& c) -> auto& { return c.train.precision; },
                "fp32 | bf16 | fp16: parameters and activations in that type, fp32 master weights and AdamW (chunks); "
                "fp8 (train.device = cuda, a GPU with fp8 tensor cores: Ada, Hopper or later): bf16, with the linear "
                "layers' products in fp8, e4m3 forward and e5m2 gradients, one scale per tensor (the output layer "
                "stays bf16); unset with train.device = cuda: bf16");
  k.set = [set = k.set](Config& c, const Value& v) {
    c.train.fp8 = std::holds_alternative<std::string>(v) && std::get<std::string>(v) == "fp8";
    set(c, c.train.fp8 ? Value(std::string("bf16")) : v);
  };
  k.get = [get = k.get](const Config& c) { return c.train.fp8 ? Value(std::string("fp8")) : get(c); };
  return k;
}

// The key's name is its path in Config: TIDAL_KEY(train.steps, ...) is "train.steps".
#define TIDAL_KEY(path, help) field(#path, [](Config& c) -> auto& { return c.path; }, help)
#define TIDAL_KEY_FROM(path, least, help) field(#path, [](Config& c) -> auto& { return c.path; }, help, least)

// A family's own key (models/family_keys.h) as [model]'s: a value checked against its declaration
// and kept in ModelConfig::family_keys; its help names the families that read it.
Key family_key(const models::DeclaredKey& d) {
  const models::FamilyKey& f = d.key;
  Key k;
  k.name = "model." + f.name;
  k.help = fmt::format("{}: {}", fmt::join(d.readers, ", "), f.help);
  constexpr Key::Type types[] = {Key::Type::integer, Key::Type::number, Key::Type::string, Key::Type::boolean};
  k.type = types[f.fallback.index()];
  k.set = [f, n = k.name](Config& c, const Value& v) {
    if (const auto* x = std::get_if<std::int64_t>(&v))
      TIDAL_CHECK(*x >= f.least, "{} must not be {}, got {}", n,
                  f.least == 0 ? "negative" : fmt::format("below {}", f.least), *x);
    if (const auto* x = std::get_if<double>(&v)) TIDAL_CHECK(std::isfinite(*x), "{} must be a finite number, got {}", n, *x);
    if (const auto* x = std::get_if<std::string>(&v))
      TIDAL_CHECK(f.names.empty() || std::find(f.names.begin(), f.names.end(), *x) != f.names.end(),
                  "{} = \"{}\" is not one of {}", n, *x, fmt::join(f.names, " | "));
    c.model.family_keys[f.name] = v;
  };
  k.get = [name = f.name](const Config& c) { return models::family_key(c.model, name); };
  return k;
}

std::vector<Key> make_schema() {
  std::vector<Key> keys = {
      TIDAL_KEY(model.type, "the model family: " + models::model_type_names() +
                                " (or a type a program registers: models/registry.h)"),
      TIDAL_KEY(model.n_layer, "transformer blocks"),
      TIDAL_KEY(model.n_head, "attention heads (must divide n_embd)"),
      TIDAL_KEY(model.n_embd, "hidden width"),
      TIDAL_KEY(model.vocab_size, "token vocabulary (the language models)"),
      TIDAL_KEY(model.seq_len, "tokens per sequence (learned positions)"),
      TIDAL_KEY(model.dropout, "embedding and residual dropout probability"),
      TIDAL_KEY(model.ln_eps,
                "LayerNorm (llama: RMSNorm) epsilon; 0 = the model's own (gpt 1e-5, bert 1e-12, vit 1e-6, llama 1e-6)"),
      TIDAL_KEY(model.init_from,
                "a Hugging Face model directory (config.json + model.safetensors or its shards) of a model_type the "
                "families read (" + models::hf_architecture_names() +
                    "): its config.json fills model.* and its weights are the start"),
  };
  // Each family's own keys (its folder declares them), then the sections every run has.
  for (const models::DeclaredKey& d : models::declared_keys()) keys.push_back(family_key(d));
  const std::vector<Key> sections = {
      TIDAL_KEY(data.kind,
                "markov | tokens (llm.c shards) | indexed (Megatron's .bin / .idx) | text (a file's bytes) | chat "
                "(JSON lines of {\"messages\": [{\"role\", \"content\"}, ...]}: rendered with data.chat_template, "
                "tokenized with data.tokenizer, the loss on the assistant's answers alone, conversations packed whole "
                "and attending only inside each) | images"),
      TIDAL_KEY(data.path,
                "the data: tokens: a shard, a directory of them or a glob; indexed: the prefix of PREFIX.bin and "
                "PREFIX.idx; text, chat, images: a file; any token kind may be a blend by weight, \"0.7 a.bin 0.3 b.bin\""),
      TIDAL_KEY(data.eval_path,
                "token data to evaluate on, as data.path names it (\"\" = hold out the last 1/20 of data.path's "
                "sequences)"),
      TIDAL_KEY(data.seed, "seed of the synthetic data and of the sample order"),
      TIDAL_KEY(data.markov_branching, "markov: successors per state"),
      TIDAL_KEY(data.cross_document_attention,
                "false: a sequence packs the documents it spans and attends only inside each, positions (learned or "
                "rotary) restarting at each, and no token is trained to predict the next document's first (as Llama "
                "3 trained); the documents are indexed data's own, or end at data.eod_id"),
      TIDAL_KEY_FROM(data.eod_id, -1,
                "the end-of-text id that ends a document of data.kind = \"tokens\" or \"text\" (GPT-2: 50256; the "
                "token belongs to the document it ends); -1 = none"),
      TIDAL_KEY(data.tokenizer,
                "a Hugging Face tokenizer.json (byte-level BPE) that tokenizes chat data and turns "
                "train.sample_prompt into ids and the samples into text (\"\" = none: data.kind = \"text\" is then "
                "byte-level, other kinds show ids)"),
      TIDAL_KEY(data.chat_template,
                "chat: tokenizer (the chat_template of tokenizer_config.json beside data.tokenizer, when it is one of "
                "these) | chatml (<|im_start|>role\\ncontent<|im_end|>\\n) | llama3 (<|begin_of_text|>, "
                "<|start_header_id|>role<|end_header_id|>\\n\\ncontent<|eot_id|>); `tidal data` shows the samples"),
      TIDAL_KEY(train.steps, "optimizer steps"),
      TIDAL_KEY(train.batch_size, "global batch, in sequences"),
      TIDAL_KEY(train.micro_batch_size, "sequences per forward/backward (0 = batch_size); the rest accumulate"),
      TIDAL_KEY(train.lr, "peak learning rate"),
      TIDAL_KEY(train.min_lr, "learning rate at the end of the cosine decay"),
      TIDAL_KEY(train.warmup_steps, "linear warm-up steps"),
      TIDAL_KEY(train.weight_decay, "AdamW decoupled weight decay"),
      TIDAL_KEY(train.beta1, "AdamW beta1"),
      TIDAL_KEY(train.beta2, "AdamW beta2"),
      TIDAL_KEY(train.grad_clip, "global gradient-norm clip (0 = off)"),
      TIDAL_KEY(train.seed, "seed of initialisation and dropout"),
      TIDAL_KEY(train.device,
                "cpu | cuda: where the step computes (cuda: a node's ranks take its GPUs in turn, and ranks beyond their "
                "count share them; collectives over MPI, GPU tensors staged through pinned host memory)"),
      precision_key(),
      TIDAL_KEY(train.loss_scale, "fp16: the first dynamic loss scale (halved on an overflow)"),
      TIDAL_KEY(train.loss_scale_window, "fp16: finite steps in a row before the loss scale doubles"),
      TIDAL_KEY(train.on_nonfinite,
                "stop | skip: a step whose loss or gradient norm is not finite never updates the weights; stop ends "
                "the run (exit 3, naming the step and what was not finite; the last checkpoint stays latest), skip "
                "drops the step"),
      TIDAL_KEY(train.max_skipped_steps,
                "steps dropped in a row (non-finite under skip, fp16 overflows) that end the run (exit 3)"),
      TIDAL_KEY(train.eval_every, "steps between eval losses (0 = only at the end)"),
      TIDAL_KEY(train.eval_batches, "held-out batches per eval"),
      TIDAL_KEY(train.activation_checkpointing,
                "none | blocks (keep only each block's input, recompute in backward) | every_k (runs of k blocks) "
                "| selective (let go of each MLP's activation output and each attention's q, k, v, remade in "
                "backward: one extra qkv projection per block)"),
      TIDAL_KEY(train.activation_checkpointing_k, "every_k: consecutive blocks per checkpointed run"),
      TIDAL_KEY(train.activation_offload, "none | host: checkpointed inputs wait in host memory until backward"),
      TIDAL_KEY(train.attention,
                "train.device = cuda: auto (cuDNN's fused attention where it serves the case: bf16 / fp16, no key "
                "padding mask, libcudnn.so.9 present; tidal's own flash kernels elsewhere) | cudnn (cuDNN or an error "
                "saying why not) | own (tidal's kernels always)"),
      TIDAL_KEY(train.loss_chunks,
                "gpt, bert, llama: the output layer and the loss run over this many blocks of positions, so one "
                "block's logits [positions / loss_chunks, vocabulary] exist at a time instead of all of them; "
                "backward makes each block's logits again (one more output-layer forward). 1 = all at once"),
      TIDAL_KEY(train.log_every, "steps between progress lines when not on a terminal"),
      TIDAL_KEY(train.log_samples,
                "each step's metrics record names the samples of its global batch (sample_ids: token windows; a "
                "blend's source k's window w as k * 2^40 + w), as the data-parallel replicas read them"),
      TIDAL_KEY(train.tensorboard_dir,
                "directory for TensorBoard event files of every step's metrics (loss, eval loss, lr, tokens/s, "
                "gradient norm, loss scale, memory per tier); \"\" = none (tidal train --tensorboard DIR)"),
      TIDAL_KEY(train.sample_every,
                "a causal language model: every this many steps (and at the end) a progress line with 32 tokens "
                "greedily continuing train.sample_prompt (0 = off); needs the weights plain in one process: one "
                "rank, train.precision = \"fp32\", zero.stage = 0, memory.offload = \"none\""),
      TIDAL_KEY(train.sample_prompt,
                "the text train.sample_every continues (with data.tokenizer; without it token ids \"1 2 3\", or "
                "bytes for data.kind = \"text\"); \"\" = from the tokenizer's end-of-text token (without a "
                "tokenizer: a newline for data.kind = \"text\", else id 0)"),
      TIDAL_KEY(train.profile,
                "true: where the step's time goes, per op family (gemm, attention, layernorm, ...) and module kind, "
                "in each step's metrics record, the summary record and the last progress lines (on a GPU: with "
                "CUDA_LAUNCH_BLOCKING=1, or the figures are kernel launches)"),
      TIDAL_KEY(parallel.data, "data-parallel replicas"),
      TIDAL_KEY(parallel.pipeline, "pipeline stages"),
      TIDAL_KEY(parallel.sequence, "sequence-parallel ranks (ring self-attention)"),
      TIDAL_KEY(parallel.expert,
                "mixtral, qwen2_moe: expert parallelism, carved from parallel.data: groups of this many data ranks "
                "each hold 1/expert of every mixture's experts, and tokens travel to their experts' ranks and back "
                "by all-to-all (must divide parallel.data and model.experts)"),
      TIDAL_KEY(parallel.sequence_zigzag,
                "true: ring rank r of N holds chunks r and 2N-1-r of 2N, so causal attention work is equal on every "
                "rank (model.seq_len divisible by 2N); false: chunk r of N"),
      TIDAL_KEY(parallel.sequence_mode,
                "ring (ring self-attention: key/value blocks travel the ring) | ulysses (DeepSpeed-Ulysses: an "
                "all-to-all of heads around attention; heads divisible by parallel.sequence)"),
      TIDAL_KEY(parallel.schedule,
                "gpipe | 1f1b | interleaved | zb-h1 (zero bubble: each backward as its input gradient, which the "
                "stage before waits for, and its weight gradient, run where 1F1B idles) | zb-v (zero bubble in a V: two "
                "model chunks per rank, down the ranks and back, parallel.virtual_stages = 2)"),
      TIDAL_KEY(parallel.virtual_stages, "interleaved: model chunks per pipeline rank; zb-v: 2"),
      TIDAL_KEY(parallel.zb_memory,
                "zb-h1: x >= 1 = stage s holds back as many of its last s B's W's as keep its activations within x "
                "times 1F1B's largest stage's, found by replaying the step before the run (1.05, the default: within "
                "5%; more: fewer idle units); 0 = all s (the paper's count)"),
      TIDAL_KEY(parallel.partition, "pipeline stages balance: layers | parameters | time (measured at start-up)"),
      TIDAL_KEY(parallel.scatter_gather,
                "pipeline x 1D tensor: each tensor rank sends 1/t of the activation, the next stage all-gathers"),
      TIDAL_KEY(parallel.bucket_mb, "data parallel: MiB of gradients per all-reduce bucket, overlapped with backward"),
      TIDAL_KEY(parallel.timeout_s, "seconds a collective may take before the watchdog ends the job"),
      TIDAL_KEY(parallel.gpu_collectives,
                "train.device = cuda: auto (nccl where every rank has a GPU of its own, else staged) | nccl "
                "(collectives on GPU tensors GPU to GPU; host tensors and send / recv over MPI) | staged (everything "
                "over MPI, GPU tensors through pinned host memory: what lets ranks share a GPU)"),
      TIDAL_KEY(parallel.ranks_per_node, "ranks per node (0 = as launched); keeps tensor groups inside a node"),
      field("parallel.auto", [](Config& c) -> auto& { return c.parallel.auto_layout; },
            "true: tidal train picks parallel.data, pipeline, tensor.size / mode / depth, sequence and zero.stage "
            "for the launched ranks by the cost model (the fastest predicted layout that fits; tidal plan --world N "
            "shows the ranking) and prints why; with them a pipeline's train.micro_batch_size where unset, and "
            "activation checkpointing or more micro-batches where a layout needs them to fit"),
      TIDAL_KEY(parallel.hardware,
                "parallel.auto: the machine (a hardware file: configs/hardware/*.toml, or tidal calibrate's); \"\" = "
                "measure this one at start-up (a quick tidal calibrate over the launched ranks)"),
      TIDAL_KEY(parallel.tensor.size, "tensor-parallel ranks"),
      TIDAL_KEY(parallel.tensor.mode, "1d | 2d | 2.5d | 3d"),
      TIDAL_KEY(parallel.tensor.depth, "2.5d: depth d (size = q * q * d)"),
      TIDAL_KEY(parallel.tensor.keep_gathered,
                "less traffic, more memory: 3d keeps each linear's gathered input blocks for backward, 2.5d holds "
                "whole weight blocks in every depth layer; false (the default) gathers the inputs again in backward "
                "and holds one depth slice of each block"),
      TIDAL_KEY(zero.stage,
                "0..3 over the data-parallel (x sequence) ranks: shard optimizer states, + gradients, + parameters "
                "(chunks)"),
      TIDAL_KEY(zero.fetch,
                "how sharded parameters reach every rank: all_gather (a chunk group at once, PatrickStar) | "
                "broadcast (each chunk from its owner, ZeRO-DP's way: 10(p-1)/p M bytes against 6(p-1)/p M)"),
      TIDAL_KEY(memory.offload,
                "none | chunk (chunks move between the device and the host by tensor state, guided by a warm-up "
                "trace) | static (ZeRO-Offload's split: parameters on the device, optimizer states and Adam on the "
                "host)"),
      TIDAL_KEY(memory.device_limit,
                "cap on each rank's device tier (chunks and activations together), e.g. \"2GiB\" (\"\" = none; "
                "needed by memory.offload on a machine without a GPU; too small a cap stops after the warm-up naming "
                "the least that trains)"),
      TIDAL_KEY(memory.host_limit,
                "cap on the host tier's model data under memory.offload, e.g. \"8GiB\" (\"\" = none; the host holds "
                "every chunk at the start and in the warm-up)"),
      TIDAL_KEY(memory.disk_dir,
                "directory of the disk tier under memory.offload and memory.host_limit: the optimizer states (fp32 "
                "master, momentum, variance) of the last chunks the host cannot hold live in a file there, read and "
                "written back at each step; and a LoRA run's frozen base under finetune.base_offload = \"disk\" "
                "(\"\" = none)"),
      TIDAL_KEY(memory.disk_limit,
                "cap on each rank's optimizer states in memory.disk_dir, e.g. \"48GiB\" (\"\" = none: the disk's own "
                "room, which the run reserves at start-up); tidal plan fits the largest model within it"),
      TIDAL_KEY(memory.chunk_size, "chunk elements (0 = searched)"),
      TIDAL_KEY(memory.eviction, "belady (the chunk used again furthest ahead, from the trace) | lru"),
      TIDAL_KEY(memory.warmup_fraction,
                "of the device tier the chunks may take during the warm-up iteration (never more than the non-model "
                "data leaves)"),
      TIDAL_KEY(memory.embedding_on_host,
                "gpt, bert under memory.offload with model.tie_embeddings = false: the embedding layer's tables stay "
                "in host memory, outside the device's chunks, and its lookups run on the CPU; only its output and "
                "gradient cross to the device (patrickstar-v1 sec. 8.2)"),
      TIDAL_KEY(checkpoint.dir, "checkpoint directory (\"\" = no checkpoints)"),
      TIDAL_KEY(checkpoint.every, "steps between checkpoints (0 = at the end and at --stop-after)"),
      TIDAL_KEY(checkpoint.keep, "checkpoints kept"),
      TIDAL_KEY(checkpoint.async,
                "true: each rank's state is staged and written by a thread of its own while training goes on (the "
                "next optimizer update waits for what is read in place); false: the step waits for the write; auto = "
                "true with more than one rank"),
      TIDAL_KEY(checkpoint.buffer_size,
                "each rank's staging buffer for the state it writes from device memory or the disk tier, e.g. "
                "\"256MiB\""),
      TIDAL_KEY(finetune.method,
                "full (every parameter trained) | lora (low-rank adapters on the linears of finetune.lora_targets "
                "train in fp32 master weights; the rest of the model is frozen: no gradient, no optimizer state)"),
      TIDAL_KEY_FROM(finetune.lora_rank, 1, "lora: the adapters' rank r"),
      TIDAL_KEY(finetune.lora_alpha, "lora: the adapters' term is scaled by lora_alpha / lora_rank (PEFT's alpha)"),
      TIDAL_KEY(finetune.lora_dropout, "lora: dropout probability on the adapters' input"),
      TIDAL_KEY(finetune.lora_targets,
                "lora: the linears adapted, by Hugging Face module names separated by commas (q_proj, k_proj, "
                "v_proj, o_proj, gate_proj, up_proj, down_proj; GPT-2's c_attn, c_proj, c_fc); \"\" = PEFT's "
                "default for the family (q_proj,v_proj; GPT-2: c_attn)"),
      TIDAL_KEY(finetune.base_dtype,
                "lora: how the frozen base is held: compute (in train.precision) | nf4 (QLoRA: the transformer "
                "blocks' linears in 4-bit NormalFloat, blocks of 64 with double-quantized scales, about 0.52 bytes a "
                "parameter, dequantized for each product; embeddings, norms and the head in train.precision)"),
      TIDAL_KEY(finetune.base_offload,
                "lora: where the frozen base lives: none (on the device tier, all along) | host (in host memory, each "
                "module's weights copied into the step's memory while it runs and dropped after: the device holds the "
                "adapters, their optimizer state, the activations and one module's weights at a time) | disk (in a "
                "file in memory.disk_dir, read into the step's memory the same way: the host holds none of it)"),
      TIDAL_KEY(finetune.adapters_from,
                "lora: a PEFT adapter directory (adapter_config.json, adapter_model.safetensors) whose adapters "
                "start the run, on the base of model.init_from (\"\" = PEFT's init: A random, B zeros)"),
  };
  keys.insert(keys.end(), sections.begin(), sections.end());
  return keys;
}

#undef TIDAL_KEY

}  // namespace

const std::vector<Key>& schema() {
  // Built again when a program registers a family (its keys join [model]); a table built before
  // stays valid for whoever holds a key of it.
  static std::mutex mutex;
  static std::list<std::pair<std::size_t, std::vector<Key>>> built;
  const std::size_t families = models::registered_families();
  std::lock_guard lock(mutex);
  if (built.empty() || built.back().first != families) built.emplace_back(families, make_schema());
  return built.back().second;
}

std::string format_value(const Value& v) {
  if (auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return "\"" + std::get<std::string>(v) + "\"";
}

const Key* find_key(const std::string& name) {
  for (const Key& k : schema())
    if (k.name == name) return &k;
  return nullptr;
}

}  // namespace tidal::config
