#include "sim/cost_model.h"

#include "core/error.h"
#include "engine/progress.h"
#include "models/factory.h"
#include "ops/cpu/onednn_matmul.h"
#include "sim/step_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tidal::sim {

nlohmann::json StepTime::json() const {
  return {{"compute_s", compute}, {"recompute_s", recompute}, {"tensor_s", tensor}, {"sequence_s", sequence},
          {"pipeline_s", pipeline_sends}, {"data_s", data}, {"bubble_s", bubble}};
}

nlohmann::json Prediction::json() const {
  double host = 0;
  for (const RankMemory& r : this->ranks) host = std::max(host, r.host);
  nlohmann::json tiers = {{"device", peak_bytes}, {"host", host}};
  nlohmann::json ranks_json = nlohmann::json::array();
  for (const RankMemory& r : this->ranks)
    ranks_json.push_back({{"rank", r.rank},
                          {"model_data", r.model_data.json()},
                          {"activations", r.activations},
                          {"communication", r.traffic},
                          {"peak_bytes", {{"device", r.device}, {"host", r.host}}}});
  nlohmann::json out = {{"layout", layout},          {"step_time_s", time.total()}, {"time", time.json()},
                        {"peak_bytes", tiers},       {"largest_rank", largest_rank}, {"fits", fits},
                        {"flops_per_step", flops_per_step}, {"ranks", ranks_json}};
  if (!fits) out["does_not_fit"] = does_not_fit;
  return out;
}

namespace {

// Whether a group's ranks lie on more than one node (ranks fill nodes in rank order).
bool spans_nodes(const std::vector<int>& members, int per_node) {
  if (per_node <= 0) return false;
  const auto [lo, hi] = std::minmax_element(members.begin(), members.end());
  return *lo / per_node != *hi / per_node;
}

const Link& link_for(const Hardware& hw, const std::vector<int>& members, bool pair) {
  if (hw.inter_node && spans_nodes(members, hw.devices_per_node)) return *hw.inter_node;
  return pair ? hw.intra_node_pair : hw.intra_node_collective;
}

// Seconds of `calls` collectives moving `link_bytes` each over `link`.
double transfer(const Link& link, double calls, double link_bytes) {
  return calls > 0 ? calls * link.latency + calls * link_bytes / link.bandwidth : 0.0;
}

// Forward FLOPs of one sample through the whole model (every rank's share together).
struct ModelFlops {
  double block = 0, head = 0;  // per sample
};

ModelFlops model_flops(const config::ModelConfig& m) {
  const bool vit = m.type == "vit", llama = m.type == "llama";
  const double T = vit ? double((m.image_size / m.patch_size) * (m.image_size / m.patch_size) + 1) : double(m.seq_len);
  const double C = double(m.n_embd), H = m.n_head, Hkv = m.n_kv_head ? m.n_kv_head : m.n_head, hd = C / H;
  const double F = llama ? double(m.intermediate_size ? m.intermediate_size : (8 * m.n_embd / 3 + 255) / 256 * 256)
                         : 4 * C;
  const double gemm = 2 * T * (C * (H + 2 * Hkv) * hd + H * hd * C + C * F * (llama ? 2 : 1) + F * C);
  const bool causal = m.type == "gpt" || llama;
  const double attention = 2 * 2 * T * T * H * hd * (causal ? 0.5 : 1.0);
  ModelFlops f;
  f.block = gemm + attention;
  f.head = vit ? 2 * C * double(m.num_classes) : 2 * T * C * double(m.vocab_size) + (m.type == "bert" ? 2 * T * C * C : 0);
  return f;
}

}  // namespace

Prediction predict(const config::Config& cfg, int world_size, const Hardware* hardware) {
  Prediction p;
  const config::ParallelConfig& par = cfg.parallel;
  p.layout = {{"parallel.data", par.data},
              {"parallel.pipeline", par.pipeline},
              {"parallel.tensor.size", par.tensor.size},
              {"parallel.tensor.mode", std::string(config::name_of(par.tensor.mode))},
              {"parallel.sequence", par.sequence},
              {"zero.stage", cfg.zero.stage}};
  if (par.tensor.mode == parallel::TensorMode::d2p5) p.layout["parallel.tensor.depth"] = par.tensor.depth;
  if (par.sequence > 1) p.layout["parallel.sequence_mode"] = std::string(config::name_of(par.sequence_mode));
  const std::size_t device_capacity =
      !cfg.memory.device_limit.empty() ? std::size_t(config::parse_bytes(cfg.memory.device_limit, "memory.device_limit"))
      : hardware                      ? std::size_t(hardware->device_memory)
                                      : std::numeric_limits<std::size_t>::max();
  const int per_node = hardware ? hardware->devices_per_node : 0;
  std::vector<PlannedRank> world = plan_world(cfg, world_size, cfg.parallel.ranks_per_node ? cfg.parallel.ranks_per_node : per_node, device_capacity);
  const parallel::Layout& layout = world.front().pc->layout();
  const std::int64_t local = cfg.train.batch_size / par.data;
  const std::int64_t micro = cfg.train.micro_batch_size ? cfg.train.micro_batch_size : local;
  const int micro_batches = int(local / micro);
  // The ops of the hardware planned for; without a file, of this machine.
  const DeviceOps ops = hardware ? DeviceOps{.cpu = hardware->device == Device::Kind::cpu,
                                             .bf16_native = hardware->bf16_native}
                                 : DeviceOps{.cpu = cfg.train.device == Device::Kind::cpu,
                                             .bf16_native = cfg.train.device == Device::Kind::cuda ||
                                                            ops::cpu::onednn_bf16_native()};
  for (PlannedRank& r : world) {
    const int rank = r.pc->rank();
    RankMemory m;
    m.rank = rank;
    m.model_data = r.model_data;
    const StepReplay replay = replay_step(cfg, r, ops);
    m.activations = replay.peak_bytes;
    m.traffic = replay.traffic.json();
    const ModelDataBytes& md = m.model_data;
    m.host = double(md.embedding_on_host_bytes);
    if (!md.offload) {
      m.device = double(md.peak() - md.embedding_on_host_bytes) + m.activations;
    } else {
      // memory/dynamic_memory.h: the param list beside the step's peak non-model data, then (the
      // dynamic partition) optimizer states in the margin left, chunk by chunk in list order.
      m.host += double(md.offload_host_bytes);
      m.device = m.activations + double(md.param_bytes);
      if (!md.static_partition && md.state_bytes > 0) {
        const double margin = double(device_capacity) - m.device;
        const double fit = margin > 0 ? std::floor(margin / double(md.state_bytes)) : 0.0;
        m.device += std::min(fit, double(md.state_chunks)) * double(md.state_bytes);
      }
    }
    if (m.total() > p.peak_bytes) {
      p.peak_bytes = m.total();
      p.largest_rank = rank;
    }
    p.ranks.push_back(m);
  }
  // Whether every rank fits: the device within its capacity (under offload, what the warm-up needs
  // at the least: an operator's two param chunks beside the non-model peak, or the static
  // partition's whole param list), the host within memory.host_limit or its share of the node.
  const double host_capacity = !cfg.memory.host_limit.empty()
                                   ? double(config::parse_bytes(cfg.memory.host_limit, "memory.host_limit"))
                               : hardware ? hardware->host_memory / hardware->devices_per_node
                                          : std::numeric_limits<double>::infinity();
  for (const RankMemory& m : p.ranks) {
    const ModelDataBytes& md = m.model_data;
    const double chunk_param = double(md.chunk_elements) * double(dtype_size(cfg.train.precision));
    const double device_needs = !md.offload          ? m.device
                                : md.static_partition ? m.activations + double(md.param_bytes)
                                                      : m.activations + 2 * chunk_param;
    if (device_capacity != std::numeric_limits<std::size_t>::max() && device_needs > double(device_capacity)) {
      p.fits = false;
      p.does_not_fit = fmt::format("device: rank {} needs {}, {} more than its {}", m.rank,
                                   engine::human_bytes(std::uint64_t(device_needs)),
                                   engine::human_bytes(std::uint64_t(device_needs - double(device_capacity))),
                                   engine::human_bytes(device_capacity));
      break;
    }
    if (m.host > host_capacity) {
      p.fits = false;
      p.does_not_fit = fmt::format("host: rank {} needs {}, {} more than its {}", m.rank,
                                   engine::human_bytes(std::uint64_t(m.host)),
                                   engine::human_bytes(std::uint64_t(m.host - host_capacity)),
                                   engine::human_bytes(std::uint64_t(host_capacity)));
      break;
    }
  }

  // Time.
  const ModelFlops f = model_flops(cfg.model);
  const double samples = double(cfg.train.batch_size);
  p.flops_per_step = 3 * samples * (double(cfg.model.n_layer) * f.block + f.head);
  if (!hardware) return p;
  const auto rate_it = hardware->flops.find(cfg.train.precision);
  TIDAL_CHECK(rate_it != hardware->flops.end(), "the hardware file {} gives no {} rate", hardware->name,
              dtype_name(cfg.train.precision));
  const double rate = rate_it->second;
  const double e = double(dtype_size(cfg.train.precision));
  const int t = par.tensor.size, s = par.sequence, stages = par.pipeline, v = par.virtual_stages;
  const double split = double(t) * double(s);  // the ranks sharing one micro-batch's layer work
  const double T = double(cfg.model.type == "vit" ? (cfg.model.image_size / cfg.model.patch_size) *
                                                            (cfg.model.image_size / cfg.model.patch_size) + 1
                                                      : cfg.model.seq_len);
  const double C = double(cfg.model.n_embd);
  const int every = models::checkpoint_policy(cfg.train).every;
  double worst = 0;
  StepTime busiest;
  for (const PlannedRank& r : world) {
    const std::vector<StageLayers> ls = stage_layers(cfg, r);
    double blocks = 0;
    bool head = false;
    for (const StageLayers& l : ls) {
      blocks += l.blocks;
      head = head || l.head;
    }
    StepTime st;
    const double forward = double(micro) * (blocks * f.block + (head ? f.head : 0)) / split;
    st.compute = 3 * forward * micro_batches / rate;
    if (every > 0) st.recompute = double(micro) * blocks * f.block / split * micro_batches / rate;
    const double rows = double(micro) * T;  // one micro-batch's positions, all ranks of the group together
    if (t > 1) {
      const std::vector<int> members = layout.group(parallel::GroupKind::tensor, r.pc->rank());
      const Link& link = link_for(*hardware, members, false);
      // 1D: two all-reduces of the hidden state per block forward, two backward (colossal-ai.txt
      // Table I); the grid modes move their blocks' shares instead, about 1 / side of it per rank.
      const double side = layout.tensor_side();
      const double per_call = par.tensor.mode == parallel::TensorMode::d1
                                  ? 2.0 * (t - 1) / t * rows * C * e
                                  : 2.0 * (side - 1) / side * rows * C * e / side;
      st.tensor = transfer(link, 4 * blocks * micro_batches, per_call);
    }
    if (s > 1) {
      const std::vector<int> members = layout.group(parallel::GroupKind::sequence, r.pc->rank());
      const Link& link = link_for(*hardware, members, par.sequence_mode == parallel::SequenceMode::ring);
      const double Hkv = cfg.model.n_kv_head ? cfg.model.n_kv_head : cfg.model.n_head;
      const double kv = 2 * rows / s * Hkv * (C / cfg.model.n_head) * e;  // one rank's keys and values
      // The ring passes every other rank's keys and values forward, and them with their gradient
      // backward; Ulysses' all-to-alls move q, k, v and the output each way.
      st.sequence = par.sequence_mode == parallel::SequenceMode::ring
                        ? transfer(link, 3 * (s - 1) * blocks * micro_batches, kv)
                        : transfer(link, 8 * blocks * micro_batches, double(s - 1) / s * rows / s * C * e);
    }
    if (stages > 1) {
      const std::vector<int> members = layout.group(parallel::GroupKind::pipeline, r.pc->rank());
      const Link& link = link_for(*hardware, members, true);
      const double message = rows / (split) * C * e;
      st.pipeline_sends = transfer(link, 2.0 * micro_batches * v, message);
      const double slot = (st.compute + st.recompute) / micro_batches;
      st.bubble = double(stages - 1) / v * slot;
    }
    if (par.data * s > 1 && !(s > 1 && par.data == 1 && false)) {
      const std::vector<int> members = layout.group(
          s > 1 ? parallel::GroupKind::data_sequence : parallel::GroupKind::data, r.pc->rank());
      const double n = double(members.size());
      if (n > 1) {
        const Link& link = link_for(*hardware, members, false);
        const double P = double(r.model_data.parameters);
        const double grad_bytes = r.model_data.chunks ? e : 4.0;
        double bytes = 2 * (n - 1) / n * P * grad_bytes;                    // gradients
        if (cfg.zero.stage >= 1) bytes += (n - 1) / n * P * e;               // updated params gathered back
        if (cfg.zero.stage == 3) bytes += 2 * (n - 1) / n * P * e;           // params fetched forward, backward
        const double seconds = transfer(link, 1, bytes);
        // The tensor keeper overlaps its bucketed all-reduce with backward (2/3 of the compute).
        st.data = r.model_data.chunks ? seconds : std::max(0.0, seconds - 2.0 / 3.0 * st.compute);
      }
    }
    if (st.total() > worst) {
      worst = st.total();
      busiest = st;
    }
  }
  p.time = busiest;
  return p;
}

std::vector<config::Config> layouts(const config::Config& cfg, int world_size) {
  std::vector<config::Config> out;
  const auto divisors = [](int n) {
    std::vector<int> d;
    for (int k = 1; k <= n; ++k)
      if (n % k == 0) d.push_back(k);
    return d;
  };
  struct Tensor {
    int size;
    parallel::TensorMode mode;
    int depth;
  };
  for (int pp : divisors(world_size))
    for (int rest : divisors(world_size / pp)) {
      const int data = world_size / pp / rest;
      std::vector<Tensor> tensors = {{rest, parallel::TensorMode::d1, 1}};
      for (int q = 2; q * q <= rest; ++q) {
        if (q * q == rest) tensors.push_back({rest, parallel::TensorMode::d2, 1});
        if (rest % (q * q) == 0 && rest / (q * q) > 1) tensors.push_back({rest, parallel::TensorMode::d2p5, rest / (q * q)});
        if (q * q * q == rest) tensors.push_back({rest, parallel::TensorMode::d3, 1});
      }
      std::vector<std::pair<Tensor, int>> splits;  // (tensor, sequence)
      for (const Tensor& t : tensors) splits.push_back({t, 1});
      if (rest > 1) splits.push_back({{1, parallel::TensorMode::d1, 1}, rest});
      for (const auto& [t, seq] : splits)
        for (int zero = 0; zero <= (data * seq > 1 ? 3 : 0); ++zero) {
          config::Config c = cfg;
          c.parallel.data = data;
          c.parallel.pipeline = pp;
          c.parallel.tensor.size = t.size;
          c.parallel.tensor.mode = t.mode;
          c.parallel.tensor.depth = t.depth;
          c.parallel.sequence = seq;
          c.zero.stage = zero;
          if (pp == 1) c.parallel.virtual_stages = 1;
          try {
            (void)parallel::ParallelContext::planned(c, world_size, 0);
          } catch (const Error&) {
            continue;
          }
          out.push_back(std::move(c));
        }
    }
  return out;
}

std::string explain(const Prediction& p, const Hardware* hardware) {
  std::string out = fmt::format("layout {}\n", p.layout.dump());
  const RankMemory& r = p.ranks[std::size_t(p.largest_rank)];
  out += fmt::format("memory of rank {} (the largest): model data {} ({} parameters; {}: params {}, optimizer {}{}), "
                     "activations {}, device peak {}, host {}{}\n",
                     r.rank, engine::human_bytes(std::uint64_t(r.model_data.total())), r.model_data.parameters,
                     r.model_data.chunks ? fmt::format("chunks of {} elements x {}", r.model_data.chunk_elements,
                                                       r.model_data.chunks_in_lists)
                                         : std::string("fp32 tensors"),
                     engine::human_bytes(std::uint64_t(r.model_data.param_bytes)),
                     engine::human_bytes(std::uint64_t(r.model_data.optimizer_bytes)),
                     r.model_data.embedding_on_host_bytes
                         ? fmt::format(", embedding on host {}", engine::human_bytes(std::uint64_t(r.model_data.embedding_on_host_bytes)))
                         : std::string(),
                     engine::human_bytes(std::uint64_t(r.activations)), engine::human_bytes(std::uint64_t(r.total())),
                     engine::human_bytes(std::uint64_t(r.host)), p.fits ? "" : "; does not fit: " + p.does_not_fit);
  if (hardware) {
    const StepTime& t = p.time;
    out += fmt::format("step time {:.4g} s on {}: compute {:.4g} s, recompute {:.4g} s, tensor {:.4g} s, sequence "
                       "{:.4g} s, pipeline sends {:.4g} s, bubble {:.4g} s, data {:.4g} s (not hidden)\n",
                       t.total(), hardware->name, t.compute, t.recompute, t.tensor, t.sequence, t.pipeline_sends,
                       t.bubble, t.data);
  }
  return out;
}

}  // namespace tidal::sim
