#include "sim/cost_model.h"

#include "core/bytes.h"
#include "core/error.h"
#include "data/data_options.h"
#include "models/factory.h"
#include "models/registry.h"
#include "nn/runner.h"
#include "ops/meta/recorder.h"
#include "ops/cpu/onednn_matmul.h"
#include "sim/step_replay.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace tidal::sim {

nlohmann::json StepTime::json() const {
  return {{"compute_s", compute},         {"gemm_s", gemm},   {"attention_s", attention},
          {"memory_s", memory},           {"layer_comm_s", layer_comm},
          {"pipeline_wait_s", pipeline_wait}, {"after_s", after},   {"optimizer_s", optimizer},
          {"offload_s", offload},         {"hidden_s", hidden},     {"rank", rank}};
}

nlohmann::json Prediction::json() const {
  double host = 0;
  for (const RankMemory& r : this->ranks) host = std::max(host, r.host);
  nlohmann::json tiers = {{"device", peak_bytes}, {"host", host}};
  nlohmann::json ranks_json = nlohmann::json::array();
  for (const RankMemory& r : this->ranks) {
    ranks_json.push_back({{"rank", r.rank},
                          {"model_data", r.model_data.json()},
                          {"activations", r.activations},
                          {"communication", r.traffic},
                          {"peak_bytes", {{"device", r.device}, {"host", r.host}, {"disk", r.disk}}}});
    if (r.model_data.offload)
      ranks_json.back()["offload"] = {{"device_state_chunks", r.offload.device_state_chunks},
                                      {"host_state_chunks", r.offload.host_state_chunks},
                                      {"evictions", r.offload.evictions},
                                      {"bytes_host_to_device", r.offload.bytes_each_way},
                                      {"bytes_device_to_host", r.offload.bytes_each_way}};
  }
  nlohmann::json out = {{"layout", layout},          {"step_time_s", time.total()}, {"time", time.json()},
                        {"peak_bytes", tiers},       {"largest_rank", largest_rank}, {"fits", fits},
                        {"flops_per_step", flops_per_step}, {"ranks", ranks_json}};
  if (!fits) out["does_not_fit"] = does_not_fit;
  if (!untimed.empty()) out["untimed"] = untimed;
  out["checkpoint"] = checkpoint.json();
  return out;
}

namespace {

// Whether a group's ranks lie on more than one node (ranks fill nodes in rank order).
bool spans_nodes(const std::vector<int>& members, int per_node) {
  if (per_node <= 0) return false;
  const auto [lo, hi] = std::minmax_element(members.begin(), members.end());
  return *lo / per_node != *hi / per_node;
}

// Latency-bandwidth time of `rank`'s collectives (sim/traffic.h's LinkTime): a send, or any
// operation of a group of two, over the link between two ranks, a larger group's over the node's
// collective link, inter-node where its group spans nodes; latency once per step of the ring algorithm the bytes assume (2 (p - 1) for an
// all-reduce, p - 1 for an all-gather or reduce-scatter, a broadcast or reduce as a scatter and a
// gather), and its bytes at the link's bandwidth for messages of their size (sim/hardware.h). A
// receive is the send's other end: its time is the send's.
LinkTime link_time(const Hardware& hw, const parallel::Layout& layout, int rank) {
  // Each group kind's link, found once (the replay asks for every collective it counts).
  struct GroupLinks {
    std::string_view name;
    const Link* pair;        // a send, or a collective of two ranks joined by a link of their own
    const Link* collective;  // any other collective
  };
  std::vector<GroupLinks> links;
  for (parallel::GroupKind kind : parallel::kAllGroupKinds) {
    const std::vector<int> members = layout.group(kind, rank);
    // A send goes over the pair's link. A collective goes over the node's collective link (what
    // calibrate's all-reduce measures: on a CPU it runs the reduction and MPI's non-blocking
    // algorithm as well, several times slower than a send), except between two ranks that the
    // node joins by a link of their own (links.pairs = "adjacent": a 2D row of two on NVLink).
    const bool across = hw.inter_node && spans_nodes(members, hw.devices_per_node);
    const bool adjacent = members.size() == 2 && members[0] / 2 == members[1] / 2 && hw.adjacent_pairs;
    links.push_back({parallel::group_name(kind), across ? &*hw.inter_node : &hw.intra_node_pair,
                     across     ? &*hw.inter_node
                     : adjacent ? &hw.intra_node_pair
                                : &hw.intra_node_collective});
  }
  return [links = std::move(links)](std::string_view group, int size, std::string_view op, double calls, double bytes) {
    if (op == "recv" || op == "barrier") return 0.0;
    const GroupLinks* g = &links.front();  // the world, for a group not named
    for (const GroupLinks& l : links)
      if (l.name == group) g = &l;
    const Link& link = op == "send" ? *g->pair : *g->collective;
    const double steps = op == "send" ? 1.0 : op == "all_gather" || op == "reduce_scatter" ? size - 1.0 : 2.0 * (size - 1);
    return calls * steps * link.latency + bytes / link.bandwidth_at(bytes / calls);
  };
}

// One pipeline's step: when each stage finishes its step's actions, and how long it spent
// running them.
struct PipelineRun {
  std::vector<double> finish, running;
};

// One pipeline simulated: a stage runs its actions in its schedule's order, a forward once the
// previous virtual stage's output has arrived (`message` seconds after it), a backward (or B) once
// the next one's gradient has, a W when the stage is free (its B ran before it). An action's seconds are at the rates of every rank computing; while
// `computing` of the pipeline's stages run an action, each runs `speedup(computing)` times as
// fast (processor sharing where the ranks share too few cores, sim/hardware.h; 1 elsewhere).
PipelineRun simulate_pipeline(const std::vector<const StepReplay*>& stages, double message, int p, int v,
                              pipeline::ScheduleKind kind, const std::function<double(int)>& speedup) {
  const int n = int(stages.size()), last = p * v - 1;
  std::map<std::tuple<bool, int, int>, double> done;  // (forward, micro-batch, virtual stage) -> finish
  std::vector<std::size_t> next(std::size_t(n), 0);
  std::vector<double> left(std::size_t(n), -1.0);  // the next action's seconds still to run (-1: not started)
  PipelineRun run{std::vector<double>(std::size_t(n), 0.0), std::vector<double>(std::size_t(n), 0.0)};
  std::vector<double>& free_at = run.finish;  // when a stage finished its last action
  // When stage s may start its next action: its input's arrival (infinity: not made yet).
  const auto start_of = [&](int s) {
    const ActionTime& a = stages[std::size_t(s)]->actions[next[std::size_t(s)]];
    const int vs = pipeline::virtual_stage(kind, p, s, a.chunk);
    if (a.weight || (a.forward ? vs == 0 : vs == last)) return free_at[std::size_t(s)];
    const int from = a.forward ? vs - 1 : vs + 1;
    const auto it = done.find({a.forward, a.micro_batch, from});
    // ZB-V's turn at the last rank hands the tensor over within the rank.
    const double sent = pipeline::stage_of(kind, p, from) == s ? 0.0 : message;
    return it == done.end() ? std::numeric_limits<double>::infinity()
                             : std::max(free_at[std::size_t(s)], it->second + sent);
  };
  for (double now = 0;;) {
    // The stages running at `now`, and the next moment another may start.
    std::vector<int> running;
    double next_start = std::numeric_limits<double>::infinity();
    for (int s = 0; s < n; ++s) {
      if (next[std::size_t(s)] == stages[std::size_t(s)]->actions.size()) continue;
      const double start = left[std::size_t(s)] >= 0 ? now : start_of(s);
      if (start <= now) running.push_back(s);
      else next_start = std::min(next_start, start);
    }
    if (running.empty()) {
      if (next_start == std::numeric_limits<double>::infinity()) break;  // every action run
      now = next_start;
      continue;
    }
    const double speed = speedup(int(running.size()));
    double step = next_start - now;
    for (int s : running) {
      double& l = left[std::size_t(s)];
      if (l < 0) l = stages[std::size_t(s)]->actions[next[std::size_t(s)]].seconds;
      step = std::min(step, l / speed);
    }
    now += step;
    for (int s : running) {
      double& l = left[std::size_t(s)];
      run.running[std::size_t(s)] += step;
      l -= step * speed;
      if (l > 1e-12 * now) continue;
      const ActionTime& a = stages[std::size_t(s)]->actions[next[std::size_t(s)]];
      if (!a.weight) done[{a.forward, a.micro_batch, pipeline::virtual_stage(kind, p, s, a.chunk)}] = now;
      free_at[std::size_t(s)] = now;
      l = -1.0;
      ++next[std::size_t(s)];
    }
  }
  return run;
}

// The model's FLOPs for one sample forward (MFU's numerator, a third of a step's without
// recomputation): its modules, whole on one device, run on one meta sample and the products they
// issue counted (ops/meta/recorder.h; attention's half under a causal mask, as FlashAttention-2
// counts).
class ProductFlops final : public ops::meta::Recorder {
 public:
  ProductFlops() : Recorder({.cpu = false}) {}
  void gemm(DType, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) override {
    flops += 2.0 * double(m) * double(n) * double(k) * double(batch);
  }
  void attention(DType, double f, std::int64_t) override { flops += f; }
  double flops = 0;
};

double forward_flops_per_sample(const Job& job) {
  const std::unique_ptr<models::Model> model = models::make_model(job.model);
  for (nn::Parameter* p : model->parameters()) p->data = Tensor::empty(p->shape, DType::f32, meta_allocator());
  MetaAllocator memory;
  const nn::Batch batch = data::shaped_batch(job.data, 1, memory);
  nn::Runner runner;
  const nn::StepState state{.runner = &runner, .training = false, .batch = &batch, .activations = &memory};
  ProductFlops counted;
  const ScopedDefaultAllocator temporaries(memory);
  const ops::meta::ScopedRecorder recording(counted);
  nn::Context ctx(state);
  model->run_forward(ctx);
  return counted.flops;
}

}  // namespace

double capacity_of_device(const Job& job, const Hardware* hardware) {
  return job.device_limit ? *job.device_limit : hardware ? hardware->device_memory : 0.0;
}

namespace {

// The ops a replay counts: the hardware planned for's, or without a file this machine's.
DeviceOps device_ops(const Job& job, const Hardware* hardware) {
  return hardware ? DeviceOps{.cpu = hardware->device == Device::Kind::cpu, .bf16_native = hardware->bf16_native}
                  : DeviceOps{.cpu = job.device() == Device::Kind::cpu,
                              .bf16_native = job.device() == Device::Kind::cuda || ops::cpu::onednn_bf16_native()};
}

// capacity_of_device as a planned world takes it: no bound is the largest size.
std::size_t device_capacity_bytes(const Job& job, const Hardware* hardware) {
  const double capacity = capacity_of_device(job, hardware);
  return capacity > 0 ? std::size_t(capacity) : std::numeric_limits<std::size_t>::max();
}

// ZB-H1's W's held back per stage (pipeline::held_weight_gradients): every kind of rank's step
// replayed as 1F1B and with each W right after its B (ranks that differ only in their data index
// run one order; a stage's figures are the largest of its kinds').
std::vector<int> held_by_bytes(const Job& job, const std::vector<PlannedRank>& world, DeviceOps ops) {
  std::vector<pipeline::StageMemory> stages(std::size_t(job.mesh().pipeline));
  std::set<std::tuple<int, int, int>> seen;
  for (const PlannedRank& r : world) {
    const parallel::Coordinates& c = r.pc->coordinates();
    if (!seen.insert({c.pipeline, c.tensor, c.sequence}).second) continue;
    const StepReplay fused = replay_step(job, r, ops, nullptr, {.kind = pipeline::ScheduleKind::one_f_one_b});
    const StepReplay split = replay_step(job, r, ops, nullptr, {.kind = std::nullopt, .held_weight_gradients = 0});
    pipeline::StageMemory& m = stages[std::size_t(c.pipeline)];
    m.fused_peak = std::max(m.fused_peak, fused.peak_bytes);
    m.split_peak = std::max(m.split_peak, split.peak_bytes);
    m.held_bytes = std::max(m.held_bytes, split.held_weight_bytes);
  }
  return pipeline::held_weight_gradients(stages, job.zb_memory);
}

// Whether ZB-H1 holds W's back by bytes (parallel.zb_memory), not by the paper's count.
bool holds_by_bytes(const Job& job) {
  return job.schedule == pipeline::ScheduleKind::zb_h1 && job.zb_memory > 0 && job.mesh().pipeline > 1;
}

// A step replayed once per kind of rank: ranks that differ only in their data-parallel index hold
// the same layers and lists and talk over groups of the same shape.
class Replays {
 public:
  Replays(const Job& job, const std::vector<PlannedRank>& world, const Hardware* hardware, DeviceOps ops)
      : job_(job), world_(world), layout_(world.front().pc->layout()), hardware_(hardware), ops_(ops) {}

  const StepReplay& of(const PlannedRank& r) {
    const parallel::Coordinates& c = r.pc->coordinates();
    const auto [kind, fresh] = first_of_kind_.try_emplace({c.pipeline, c.tensor, c.sequence}, r.pc->rank());
    if (fresh) {
      std::optional<Costs> costs;
      if (hardware_)
        costs = Costs{.hardware = hardware_, .dtype = job_.precision,
                      .link = link_time(*hardware_, layout_, r.pc->rank())};
      if (holds_by_bytes(job_) && held_.empty()) held_ = held_by_bytes(job_, world_, ops_);
      const int holds = held_.empty() ? -1 : held_[std::size_t(c.pipeline)];
      replays_.emplace(r.pc->rank(), replay_step(job_, r, ops_, costs ? &*costs : nullptr,
                                                 {.kind = std::nullopt, .held_weight_gradients = holds}));
    }
    return replays_.at(kind->second);
  }

 private:
  const Job& job_;
  const std::vector<PlannedRank>& world_;
  const parallel::Layout& layout_;
  const Hardware* hardware_;
  DeviceOps ops_;
  std::vector<int> held_;  // ZB-H1's W's held back per stage, when by bytes
  std::map<int, StepReplay> replays_;
  std::map<std::tuple<int, int, int>, int> first_of_kind_;
};

// A rank's memory at its peak: its model data beside the replayed step's activations, and under
// offload the optimizer states the device's margin takes and the chunk moves.
RankMemory rank_memory(const PlannedRank& r, const StepReplay& replay, std::size_t device_capacity) {
  RankMemory m;
  m.rank = r.pc->rank();
  m.model_data = r.model_data;
  m.activations = replay.peak_bytes;
  m.traffic = replay.traffic.json();
  const ModelDataBytes& md = m.model_data;
  m.host = double(md.embedding_on_host_bytes) + double(md.frozen_on_host());
  if (!md.offload) {
    m.device = double(md.peak() - md.embedding_on_host_bytes) + m.activations;
    return m;
  }
  // memory/dynamic_memory.h: the param list beside the step's peak non-model data, then (the
  // dynamic partition) optimizer states in the margin left, chunk by chunk in list order.
  m.host += double(md.offload_host_bytes);
  m.device = m.activations + double(md.param_bytes) + double(md.frozen_on_device());
  RankMemory::Offload& o = m.offload;
  // The margin the warm-up leaves the states: beside the peak and the rank's own chunks
  // (ZeRO-3's fetched chunks are gone by the warm-up's end); list by list, chunk by chunk, until
  // one does not fit. A chunk's states left on the host move its param chunk each way.
  double margin = md.static_partition ? 0.0 : double(device_capacity) - m.device;
  bool full = false;
  for (const ModelDataBytes::StateList& l : md.state_lists) {
    const double fit = !full && margin > 0 ? std::floor(margin / double(l.bytes)) : 0.0;
    const int on_device = int(std::min(fit, double(l.chunks)));
    full = full || on_device < l.chunks;
    margin -= on_device * double(l.bytes);
    m.device += on_device * double(l.bytes);
    o.device_state_chunks += on_device;
    o.host_state_chunks += l.chunks - on_device;
    o.bytes_each_way += (l.chunks - on_device) * double(l.param_bytes);
  }
  m.device += double(md.param_transient_bytes);
  // Evicted chunks beyond them, as many as bring the device's peak within its limit. ZeRO-3's
  // chunks of other ranks are fetched into the device, not moved.
  const double chunk = double(md.param_chunk_bytes);
  const double overflow = m.device - double(device_capacity);
  if (!md.static_partition && overflow > 0 && chunk > 0) {
    o.evictions = int(std::ceil(overflow / chunk));
    m.device = double(device_capacity);  // the evictions keep the tier within it
  }
  o.bytes_each_way += o.evictions * chunk;
  return m;
}

// memory.disk_dir (memory/chunk_manager.cpp's place_tiers): where the host cannot hold every chunk,
// the optimizer states of each list's last chunks go to a file for good, as few as bring the host
// within its capacity and as many as memory.disk_limit allows, and the host keeps two chunks'
// staging for them. Their reads and writes each step are not timed.
void on_disk(RankMemory& m, const Job& job, double host_capacity) {
  const ModelDataBytes& md = m.model_data;
  if (!md.offload || !job.chunk_options.offload || job.chunk_options.offload->disk_dir.empty()) return;
  const double limit = job.chunk_options.offload->disk_limit ? double(job.chunk_options.offload->disk_limit)
                                                             : std::numeric_limits<double>::infinity();
  for (const ModelDataBytes::StateList& list : md.state_lists) {
    if (m.host <= host_capacity || list.chunks == 0) break;
    const double each = double(list.disk_bytes);
    const int room = int(std::min<double>(list.chunks, std::floor((limit - m.disk) / each)));
    const int needed = int(std::ceil((m.host + 2 * each - host_capacity) / each));
    const int chunks = std::max(0, std::min(room, needed));
    if (chunks == 0) continue;
    m.disk += chunks * each;
    m.host -= chunks * each - 2 * each;
  }
}

// Whether every rank fits: the device within its capacity (under offload, what the warm-up needs
// at the least: an operator's two param chunks beside the non-model peak, or the static
// partition's whole param list), the host within memory.host_limit or its share of the node.
void check_fits(Prediction& p, const Job& job, const Hardware* hardware, std::size_t device_capacity) {
  const double host_capacity = job.host_limit ? *job.host_limit
                               : hardware     ? hardware->host_memory / hardware->devices_per_node
                                              : std::numeric_limits<double>::infinity();
  const auto needs_of = [&](const RankMemory& m) {
    const ModelDataBytes& md = m.model_data;
    return !md.offload          ? m.device
           : md.static_partition ? m.activations + double(md.param_bytes)
                                 : m.activations + 2 * double(md.param_chunk_bytes);
  };
  for (RankMemory& m : p.ranks) on_disk(m, job, host_capacity);
  for (const RankMemory& m : p.ranks) p.needs_bytes = std::max(p.needs_bytes, needs_of(m));
  for (const RankMemory& m : p.ranks) {
    const double device_needs = needs_of(m);
    if (device_capacity != std::numeric_limits<std::size_t>::max() && device_needs > double(device_capacity)) {
      p.fits = false;
      p.does_not_fit = fmt::format("device: rank {} needs {}, {} more than its {}", m.rank,
                                   human_bytes(std::uint64_t(device_needs)),
                                   human_bytes(std::uint64_t(device_needs - double(device_capacity))),
                                   human_bytes(device_capacity));
      return;
    }
    if (m.host > host_capacity) {
      p.fits = false;
      p.does_not_fit = fmt::format("host: rank {} needs {}, {} more than its {}", m.rank,
                                   human_bytes(std::uint64_t(m.host)),
                                   human_bytes(std::uint64_t(m.host - host_capacity)),
                                   human_bytes(std::uint64_t(host_capacity)));
      return;
    }
  }
}

// A stage's step time from its replay (`ran`: the share of its action time it ran at, beside
// fewer computing ranks or more), its pipeline's wait, and its rank's offload.
StepTime stage_time(Prediction& p, const StepReplay& r, double ran, double wait, const RankMemory& rm,
                    const Hardware& hardware) {
  // The last backward's time with the links free: the gradient reductions share them with its
  // layers' collectives, so they hide only behind the rest (its ops).
  double last_backward = 0;
  for (const ActionTime& a : r.actions)
    if (!a.forward) last_backward = a.seconds - a.comm;
  StepTime st;
  st.rank = rm.rank;
  st.gemm = r.gemm_seconds * ran;
  st.attention = r.attention_seconds * ran;
  st.compute = st.gemm + st.attention;
  st.memory = r.memory_seconds * ran;
  st.layer_comm = r.layer_comm_seconds * ran;
  st.pipeline_wait = wait;
  // The gradient reductions run beside the last backward (on a GPU their own stream and NCCL's;
  // on a CPU MPI's progress thread), all but the share that starts after it (the last bucket's,
  // the chunk keeper's last group's: of G groups one after the other, each beside the backward of
  // 1/G of the layers, G - 1 hide). Measured on 2 cores (the trainer's allreduce_s and
  // allreduce_exposed_s): ZeRO-1 over 2 ranks in 7 groups 97% hidden, data 2 x tensor 2 at ZeRO-2
  // in 7 groups 76%, ZeRO-3 over 8 ranks in one group 1%, data 2 in one bucket none.
  // Spread over several backwards (a micro-batch's groups beside its own), each hides its part.
  st.hidden = (1 - r.overlap_tail) * r.overlap_passes * std::min(r.overlappable / r.overlap_passes, last_backward);
  st.after = r.after_actions + r.overlappable - st.hidden;
  st.optimizer = r.optimizer;
  if (!rm.model_data.offload) return st;
  // Each way over the host link, one after the other (down after backward, up at the next use);
  // on a CPU a copy between allocators at the copy's rate.
  st.offload = 2 * rm.offload.bytes_each_way / hardware.host_device_bandwidth;
  // AdamW on each chunk where its states are: the host's share at the host's rate.
  const int chunks = rm.offload.device_state_chunks + rm.offload.host_state_chunks;
  const double on_host = chunks > 0 ? double(rm.offload.host_state_chunks) / chunks : 0.0;
  if (hardware.host_optimizer_bandwidth > 0)
    st.optimizer = r.optimizer * ((1 - on_host) + on_host * hardware.optimizer_bandwidth /
                                                      hardware.host_optimizer_bandwidth);
  else if (on_host > 0)
    p.untimed = fmt::format("AdamW on the host (rank {}'s states of {} of its {} chunks there), at the "
                            "device's rate here: {} gives no host.optimizer_gbps",
                            rm.rank, rm.offload.host_state_chunks, chunks, hardware.name);
  return st;
}

// The slowest rank's step time: the schedule of each kind of pipeline simulated with its stages'
// action times (a stage runs its actions in order, each once its input has arrived), then what
// the step adds after the actions, the optimizer's pass, and the gradient buckets' all-reduce
// where it outlasts the last backward it overlaps.
void predict_time(Prediction& p, const Job& job, std::vector<PlannedRank>& world, Replays& replays,
                  const Hardware& hardware, int world_size) {
  const parallel::MeshSpec& mesh = job.mesh();
  const parallel::Layout& layout = world.front().pc->layout();
  const std::int64_t micro = job.micro_batch();
  const auto rate = hardware.flops.find(job.precision);
  TIDAL_CHECK(rate != hardware.flops.end(), "the hardware file {} gives no {} rate", hardware.name,
              dtype_name(job.precision));
  const double e = double(dtype_size(job.precision));
  for (const PlannedRank& first : world) {
    const int rank = first.pc->rank();
    const std::vector<int> stages = layout.group(parallel::GroupKind::pipeline, rank);
    if (stages.front() != rank || first.pc->coordinates().data != 0) continue;  // one simulation per kind of pipeline
    std::vector<const StepReplay*> stage_replays;
    for (int s : stages) stage_replays.push_back(&replays.of(world[std::size_t(s)]));
    // A message between stages: the hidden state (1D's scatter-gather sends 1/t of it).
    const double positions = double(models::positions_per_sample(job.model)) / mesh.sequence;
    const bool grid = layout.sample_parts() > 1;
    const double samples = double(micro) / layout.sample_parts();
    const double width = double(job.model.n_embd) / (grid ? layout.tensor_side() : 1) /
                         (job.scatter_gather && !grid && mesh.tensor > 1 ? mesh.tensor : 1);
    const double message = stages.size() > 1
                               ? link_time(hardware, layout, rank)("pipeline", int(stages.size()), "send", 1,
                                                                   samples * positions * width * e)
                               : 0.0;
    // Ranks of other pipelines run the same schedule at the same moments: of the node's ranks, a
    // pipeline's computing stages stand for that share computing.
    const double ranks_on_node = std::min(world_size, hardware.devices_per_node);
    const auto speedup = [&](int computing) {
      return hardware.sharing_speedup(computing * ranks_on_node / double(stages.size()), hardware.devices_per_node);
    };
    const PipelineRun run = simulate_pipeline(stage_replays, message, mesh.pipeline, job.virtual_stages, job.schedule, speedup);
    for (std::size_t k = 0; k < stage_replays.size(); ++k) {
      double busy = 0;
      for (const ActionTime& a : stage_replays[k]->actions) busy += a.seconds;
      // The actions' terms as they ran: shorter where the stage ran beside fewer computing ranks.
      const double ran = busy > 0 ? run.running[k] / busy : 1.0;
      const StepTime st = stage_time(p, *stage_replays[k], ran, std::max(0.0, run.finish[k] - run.running[k]),
                                     p.ranks[std::size_t(stages[k])], hardware);
      if (st.total() > p.time.total()) p.time = st;
    }
  }
}

}  // namespace

std::vector<int> zero_bubble_holds(const Job& job, int world_size) {
  if (!holds_by_bytes(job)) return {};
  const std::vector<PlannedRank> world =
      plan_world(job, world_size, job.mesh().ranks_per_node, device_capacity_bytes(job, nullptr));
  return held_by_bytes(job, world, device_ops(job, nullptr));
}

Prediction predict(const Job& job, int world_size, const Hardware* hardware) {
  Prediction p;
  p.layout = job.layout;
  const std::size_t device_capacity = device_capacity_bytes(job, hardware);
  const int per_node = hardware ? hardware->devices_per_node : 0;
  std::vector<PlannedRank> world =
      plan_world(job, world_size, job.mesh().ranks_per_node ? job.mesh().ranks_per_node : per_node, device_capacity);
  Replays replays(job, world, hardware, device_ops(job, hardware));
  for (PlannedRank& r : world) {
    p.ranks.push_back(rank_memory(r, replays.of(r), device_capacity));
    if (p.ranks.back().total() > p.peak_bytes) {
      p.peak_bytes = p.ranks.back().total();
      p.largest_rank = p.ranks.back().rank;
    }
  }
  check_fits(p, job, hardware, device_capacity);
  p.flops_per_step = 3 * double(job.context.batch_size) * forward_flops_per_sample(job);
  // A checkpoint's state in device memory, per rank (what an asynchronous save stages).
  std::vector<double> on_device;
  for (const RankMemory& m : p.ranks) {
    const int chunks = m.offload.device_state_chunks + m.offload.host_state_chunks;
    on_device.push_back(m.model_data.offload ? (chunks > 0 ? double(m.offload.device_state_chunks) / chunks : 0.0)
                        : hardware ? double(hardware->device == Device::Kind::cuda)
                                   : double(job.device() == Device::Kind::cuda));
  }
  if (!hardware) {
    p.checkpoint = checkpoint_cost(job, world, on_device, nullptr, 0, 0);
    return p;
  }
  predict_time(p, job, world, replays, *hardware, world_size);
  const auto on_disk_most = std::max_element(p.ranks.begin(), p.ranks.end(),
                                             [](const RankMemory& a, const RankMemory& b) { return a.disk < b.disk; });
  if (on_disk_most != p.ranks.end() && on_disk_most->disk > 0)
    p.untimed += fmt::format("{}the disk tier's reads and writes (rank {}'s optimizer states of {} in memory.disk_dir, "
                             "each read and written back every step)",
                             p.untimed.empty() ? "" : "; ", on_disk_most->rank,
                             human_bytes(std::uint64_t(on_disk_most->disk)));
  p.checkpoint = checkpoint_cost(job, world, on_device, hardware, p.time.total(), p.time.optimizer);
  return p;
}

std::string layout_words(const nlohmann::json& l) {
  std::vector<std::string> parts;
  for (const auto& [key, word] : {std::pair{"parallel.data", "data"}, {"parallel.pipeline", "pipeline"}}) {
    if (l.at(key).get<int>() > 1) parts.push_back(fmt::format("{} {}", word, l.at(key).get<int>()));
    if (word == std::string_view("data") && l.value("parallel.expert", 1) > 1)
      parts.back() += fmt::format(" (expert {})", l.at("parallel.expert").get<int>());
  }
  if (l.at("parallel.tensor.size").get<int>() > 1)
    parts.push_back(fmt::format("{} {}{}", l.at("parallel.tensor.mode").get<std::string>(),
                                l.at("parallel.tensor.size").get<int>(),
                                l.contains("parallel.tensor.depth")
                                    ? fmt::format(" (depth {})", l.at("parallel.tensor.depth").get<int>())
                                    : std::string()));
  if (l.value("parallel.tensor.keep_gathered", false))
    parts.back() += l.at("parallel.tensor.mode").get<std::string>() == "3d" ? " keeping gathered inputs"
                                                                             : " holding whole weight blocks";
  if (l.at("parallel.sequence").get<int>() > 1)
    parts.push_back(fmt::format("{} {}", l.value("parallel.sequence_mode", std::string("ring")),
                                l.at("parallel.sequence").get<int>()));
  std::string out = parts.empty() ? "one rank" : fmt::format("{}", fmt::join(parts, " x "));
  if (l.at("zero.stage").get<int>() > 0) out += fmt::format(", zero {}", l.at("zero.stage").get<int>());
  // The planner's choices (engine/planning/planner.h).
  if (l.contains("train.micro_batch_size"))
    out += fmt::format(", micro-batch {}", l.at("train.micro_batch_size").get<std::int64_t>());
  if (l.contains("train.activation_checkpointing"))
    out += fmt::format(", recompute {}", l.at("train.activation_checkpointing").get<std::string>());
  if (l.contains("memory.offload")) out += fmt::format(", offload {}", l.at("memory.offload").get<std::string>());
  return out;
}

std::string explain(const Prediction& p, const Hardware* hardware) {
  std::string out = fmt::format("layout {}\n", p.layout.dump());
  const RankMemory& r = p.ranks[std::size_t(p.largest_rank)];
  out += fmt::format("memory of rank {} (the largest): model data {} ({} parameters; {}: params {}, optimizer {}{}), "
                     "activations {}, device peak {}, host {}{}\n",
                     r.rank, human_bytes(std::uint64_t(r.model_data.total())), r.model_data.parameters,
                     r.model_data.chunks ? fmt::format("chunks of {} elements x {}", r.model_data.chunk_elements,
                                                       r.model_data.chunks_in_lists)
                                         : std::string("fp32 tensors"),
                     human_bytes(std::uint64_t(r.model_data.param_bytes)),
                     human_bytes(std::uint64_t(r.model_data.optimizer_bytes)),
                     r.model_data.embedding_on_host_bytes
                         ? fmt::format(", embedding on host {}", human_bytes(std::uint64_t(r.model_data.embedding_on_host_bytes)))
                         : std::string(),
                     human_bytes(std::uint64_t(r.activations)), human_bytes(std::uint64_t(r.total())),
                     human_bytes(std::uint64_t(r.host)), p.fits ? "" : "; does not fit: " + p.does_not_fit);
  if (hardware) {
    const StepTime& t = p.time;
    out += fmt::format("step time {:.4g} s on {}: GEMMs {:.4g} s, attention {:.4g} s, memory {:.4g} s, the layers' "
                       "collectives {:.4g} s, pipeline waits {:.4g} s, after backward {:.4g} s, optimizer {:.4g} s{} "
                       "(gradient reductions hidden behind backward: {:.4g} s){}\n",
                       t.total(), hardware->name, t.gemm, t.attention, t.memory, t.layer_comm, t.pipeline_wait,
                       t.after, t.optimizer,
                       r.model_data.offload
                           ? fmt::format(", offload's moves {:.4g} s ({} each way: states of {} chunks on the host, "
                                         "{} evicted)",
                                         t.offload, human_bytes(std::uint64_t(r.offload.bytes_each_way)),
                                         r.offload.host_state_chunks, r.offload.evictions)
                           : std::string(),
                       t.hidden, p.untimed.empty() ? std::string() : "; not timed: " + p.untimed);
  }
  const CheckpointCost& c = p.checkpoint;
  double total = 0, largest = 0, staged = 0;
  for (std::size_t i = 0; i < c.bytes.size(); ++i) {
    total += c.bytes[i];
    largest = std::max(largest, c.bytes[i]);
    staged = std::max(staged, c.staging[i]);
  }
  out += fmt::format("a checkpoint: {} in all, at most {} from one rank{}", human_bytes(std::uint64_t(total)),
                     human_bytes(std::uint64_t(largest)),
                     c.async ? fmt::format(", written in the background ({} staged in host memory at most)",
                                           human_bytes(std::uint64_t(staged)))
                             : std::string());
  if (hardware && hardware->disk_write)
    out += fmt::format("; the write {:.4g} s, the step waits {:.4g} s\n", c.write, c.stall());
  else
    out += hardware ? fmt::format("; not timed: {} gives no [disk]\n", hardware->name) : std::string("\n");
  return out;
}

}  // namespace tidal::sim
