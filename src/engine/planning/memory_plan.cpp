#include "engine/planning/memory_plan.h"

#include "config/options.h"
#include "core/bytes.h"
#include "core/error.h"
#include "engine/model_data.h"
#include "engine/planning/chunk_search.h"
#include "engine/planning/job.h"
#include "engine/planning/tide.h"
#include "engine/trainer.h"
#include "parallel/context.h"

#include <fmt/format.h>

#include <algorithm>

namespace tidal::engine {
namespace {

config::Config with_layers(config::Config cfg, int layers) {
  cfg.model.n_layer = layers;
  return cfg;
}

// The warm-up of `layers` layers traced without caps (with `chunk_size`: 0 = the search's).
nlohmann::json traced(const config::Config& cfg, int layers, std::int64_t chunk_size = 0) {
  config::Config probe = with_layers(cfg, layers);
  probe.memory.device_limit.clear();
  probe.memory.host_limit.clear();
  probe.memory.disk_dir.clear();
  if (chunk_size) probe.memory.chunk_size = chunk_size;
  return trace_warmup(probe);
}

std::int64_t traced_non_model(const config::Config& cfg, int layers) {
  return traced(cfg, layers).at("peak_non_model_bytes").get<std::int64_t>();
}

// The largest of a per-rank figure of a probe's summary (or the single rank's).
std::int64_t largest(const nlohmann::json& model_data, const std::string& key) {
  if (!model_data.contains(key + "_per_rank")) return model_data.at(key).get<std::int64_t>();
  std::int64_t out = 0;
  for (const auto& v : model_data.at(key + "_per_rank")) out = std::max(out, v.get<std::int64_t>());
  return out;
}

// Every row traced under the launched layout (the header's "under mpirun").
void plan_traced(const config::Config& cfg, int max_layers, comm::MpiRuntime& mpi, MemoryPlan& plan) {
  TIDAL_CHECK(cfg.memory.offload == config::Offload::chunk,
              "tidal plan under mpirun traces each model's warm-up under the layout with memory.offload = \"chunk\" "
              "(it is \"{}\"): set it, or plan the static partition in one process",
              cfg.memory.offload);
  const bool disk = !cfg.memory.disk_dir.empty();
  // The fewest layers the layout runs: one block layer per virtual pipeline stage.
  const config::TrainConfig& t = cfg.train;
  const int per_block_layer = t.activation_checkpointing == config::Recompute::every_k ? std::max(1, t.activation_checkpointing_k) : 1;
  const int fewest = cfg.parallel.pipeline * cfg.parallel.virtual_stages * per_block_layer;
  for (int n = fewest; n <= max_layers; ++n) {
    config::Config probe = trace_config(with_layers(cfg, n));
    probe.memory.host_limit.clear();
    probe.memory.disk_dir.clear();
    probe.train.eval_batches = 0;  // past the warm-up a cap below the need would stop a rank alone
    parallel::ParallelContext pc(config::context_options(probe), &mpi);
    const TrainSummary run = train(probe, {.quiet = true, .enforce_device_limit = false}, pc);
    const nlohmann::json& md = run.model_data;
    PlanRow row{.layers = n, .chunk_size = md.at("chunk_elements").get<std::int64_t>(),
                .model_data_bytes = largest(md, "model_data_bytes")};
    row.parameters = model_parameters(probe);
    row.host_needs = largest(md, disk ? "host_needs_with_disk_bytes" : "host_needs_bytes");
    row.device_needs = largest(md, "least_device_limit_bytes");
    row.traced = true;
    row.fits_host = std::uint64_t(row.host_needs) <= plan.host_limit;
    row.fits_device = std::uint64_t(row.device_needs) <= plan.device_limit;
    plan.rows.push_back(row);
    if (!row.fits()) break;
    plan.largest = n;
  }
}

// The non-model peak of `layers` layers as the cost model replays the step on meta tensors.
std::int64_t predicted_non_model(const config::Config& cfg, int layers, const sim::Hardware& hardware) {
  return std::int64_t(predict(with_layers(cfg, layers), 1, &hardware).ranks.front().activations);
}

void plan_one_rank(const config::Config& cfg, int max_layers, const sim::Hardware* hardware, MemoryPlan& plan) {
  const bool disk = !cfg.memory.disk_dir.empty();
  plan.non_model_one = hardware ? predicted_non_model(cfg, 1, *hardware) : traced_non_model(cfg, 1);
  plan.non_model_two = hardware ? predicted_non_model(cfg, 2, *hardware) : traced_non_model(cfg, 2);
  const std::int64_t per_layer = std::max<std::int64_t>(0, plan.non_model_two - plan.non_model_one);

  const std::int64_t local = cfg.train.batch_size;
  const std::int64_t micro = cfg.train.micro_batch_size ? cfg.train.micro_batch_size : local;
  const memory::ChunkOptions options = config::chunk_options(cfg, local / micro > 1);
  const bool fixed = cfg.memory.offload == config::Offload::static_split;
  // memory.embedding_on_host: the embedding layer's lists live on the host whatever the layers.
  memory::ChunkOptions host_options = options;
  host_options.offload.reset();
  const std::vector<std::int64_t> host_numels = parameter_numels(cfg, true);
  std::int64_t host_lists = 0;
  if (!host_numels.empty()) {
    const memory::ChunkLayout layout =
        memory::layout_chunks(host_numels, memory::chunk_size_for(host_numels, 1, host_options, 0), 1);
    host_lists = memory::chunk_list_bytes(layout, host_options).total();
  }
  for (int n = 1; n <= max_layers; ++n) {
    const std::vector<std::int64_t> numels = parameter_numels(with_layers(cfg, n));
    const std::int64_t size = memory::chunk_size_for(numels, 1, options, plan.device_limit);
    const memory::ChunkLayout layout = memory::layout_chunks(numels, size, 1);
    const memory::ChunkListBytes bytes = memory::chunk_list_bytes(layout, options);
    const std::int64_t non_model = plan.non_model_one + per_layer * (n - 1);
    const std::int64_t two_chunks = 2 * size * std::int64_t(dtype_size(options.compute_dtype));
    PlanRow row{.layers = n, .parameters = model_parameters(with_layers(cfg, n)), .chunk_size = size,
                .model_data_bytes = bytes.total() + host_lists};
    // The disk tier takes the optimizer states of as many chunks as memory.disk_limit holds (no
    // cap: all): the host then needs the rest of the lists and the staging buffers (when that is
    // less than everything), the disk the least the host leaves it.
    row.host_needs = memory::host_bytes_needed(layout, options, 0);
    if (disk) {
      const std::int64_t states = memory::disk_chunk_bytes(layout);
      const int most = plan.disk_limit ? int(std::min<std::int64_t>(layout.chunks, std::int64_t(plan.disk_limit) / states))
                                       : layout.chunks;
      row.host_needs = std::min(row.host_needs, memory::host_bytes_needed(layout, options, most));
      const int needed = memory::disk_chunks_needed(layout, options, std::int64_t(plan.host_limit) - host_lists);
      row.disk_needs = std::int64_t(needed < 0 ? most : std::min(needed, most)) * states;
    }
    row.host_needs += host_lists;
    // The chunks' bound: two chunks beside the non-model peak, an upper bound of what the run
    // needs (memory_tracer.h's least_limit: each operator's chunks beside its interval's
    // non-model peak). Where it does not fit, the warm-up of exactly this model is traced at the
    // run's chunk size, so the first row that does not fit names what the run itself demands.
    row.device_needs = fixed ? bytes.param + non_model : non_model + two_chunks;
    row.fits_host = std::uint64_t(row.host_needs) <= plan.host_limit;
    if (!hardware && !fixed && row.fits_host && std::uint64_t(row.device_needs) > plan.device_limit) {
      row.device_needs = traced(cfg, n, size).at("least_device_limit_bytes").get<std::int64_t>();
      row.traced = true;
    }
    row.fits_device = std::uint64_t(row.device_needs) <= plan.device_limit;
    plan.rows.push_back(row);
    if (!row.fits()) break;
    plan.largest = n;
  }
}

}  // namespace

MemoryPlan plan_memory(const config::Config& cfg, int max_layers, comm::MpiRuntime* mpi,
                       const sim::Hardware* hardware) {
  TIDAL_CHECK(cfg.memory.offload != config::Offload::none &&
                  (hardware || (!cfg.memory.device_limit.empty() && !cfg.memory.host_limit.empty())),
              "tidal plan fits a model under both memory caps: set memory.offload (\"chunk\" or \"static\"), "
              "memory.device_limit and memory.host_limit, e.g. --set memory.offload=chunk --set "
              "memory.device_limit=64MiB --set memory.host_limit=1GiB (or give --hardware, whose device and host "
              "are the caps)");
  TIDAL_CHECK(!hardware || parallel::launched_world_size(mpi) == 1,
              "tidal plan --hardware predicts one process's model (the cost model, nothing runs); under mpirun it "
              "traces each row under the layout instead: drop --hardware, or run it without mpirun");
  TIDAL_CHECK(max_layers >= 1, "--max-layers must be >= 1, got {}", max_layers);
  MemoryPlan plan;
  const bool disk = !cfg.memory.disk_dir.empty();
  plan.model = fmt::format("{} at width {} ({} heads), batch {} x {}, {}, memory.offload = {}{}", cfg.model.type,
                           cfg.model.n_embd, cfg.model.n_head, cfg.train.batch_size, cfg.model.seq_len,
                           config::name_of(cfg.train.precision), cfg.memory.offload,
                           disk ? ", optimizer states beyond the host on disk (memory.disk_dir)" : "");
  plan.device_limit = !cfg.memory.device_limit.empty()
                          ? config::parse_bytes(cfg.memory.device_limit, "memory.device_limit")
                          : std::uint64_t(hardware->device_memory);
  plan.host_limit = !cfg.memory.host_limit.empty()
                        ? config::parse_bytes(cfg.memory.host_limit, "memory.host_limit")
                        : std::uint64_t(hardware->host_memory / hardware->devices_per_node);
  plan.disk_limit = cfg.memory.disk_limit.empty() ? 0 : config::parse_bytes(cfg.memory.disk_limit, "memory.disk_limit");
  plan.predicted = hardware != nullptr;
  if (hardware) plan.model += fmt::format(", on {}", hardware->name);
  if (plan.disk_limit) plan.model += fmt::format(" up to memory.disk_limit = {}", human_bytes(plan.disk_limit));
  if (parallel::launched_world_size(mpi) > 1) {
    plan.ranks = parallel::launched_world_size(mpi);
    const config::ParallelConfig& p = cfg.parallel;
    plan.model += fmt::format(", data {} x pipeline {} x tensor {} ({}) x sequence {}, zero.stage {}", p.data,
                              p.pipeline, p.tensor.size, p.tensor.mode, p.sequence, cfg.zero.stage);
    plan_traced(cfg, max_layers, *mpi, plan);
  } else {
    plan_one_rank(cfg, max_layers, hardware, plan);
  }
  if (plan.largest == 0) {
    const PlanRow& r = plan.rows.front();
    throw Error(fmt::format("even {} of {} does not fit: it needs {} on the host (memory.host_limit = {}) and {} "
                            "on the device tier (memory.device_limit = {}){}; raise the caps, or make the width, batch "
                            "or sequence smaller",
                            r.layers == 1 ? std::string("1 layer") : fmt::format("{} layers", r.layers), plan.model, human_bytes(std::uint64_t(r.host_needs)), human_bytes(plan.host_limit),
                            human_bytes(std::uint64_t(r.device_needs)), human_bytes(plan.device_limit),
                            plan.ranks > 1 ? fmt::format(" on the rank that needs the most of {}", plan.ranks) : ""));
  }
  return plan;
}

nlohmann::json MemoryPlan::json() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const PlanRow& r : rows)
    rows_json.push_back({{"layers", r.layers},
                         {"parameters", r.parameters},
                         {"chunk_size", r.chunk_size},
                         {"model_data_bytes", r.model_data_bytes},
                         {"host_needs", r.host_needs},
                         {"device_needs", r.device_needs},
                         {"device_needs_traced", r.traced},
                         {"disk_needs", r.disk_needs},
                         {"fits_host", r.fits_host},
                         {"fits_device", r.fits_device}});
  return {{"model", model},
          {"ranks", ranks},
          {"device_limit", device_limit},
          {"host_limit", host_limit},
          {"disk_limit", disk_limit},
          {"non_model_bytes_from", predicted ? "the cost model (meta tensors)" : "traced warm-ups"},
          {"non_model_bytes", {{"1 layer", non_model_one}, {"2 layers", non_model_two}}},
          {"rows", rows_json},
          {"largest", largest}};
}

std::string format_memory_plan(const MemoryPlan& plan) {
  std::string out = fmt::format("plan: {}; device tier {}, host {}{}\n", plan.model, human_bytes(plan.device_limit),
                                human_bytes(plan.host_limit),
                                plan.ranks > 1 ? fmt::format(" on each of {} ranks", plan.ranks) : "");
  if (plan.ranks > 1)
    out += fmt::format("every row traced under the layout; each figure is the rank that needs the most\n\n");
  else
    out += fmt::format("non-model peak of {}: {} with 1 layer, {} with 2: {} more per layer\n\n",
                       plan.predicted ? "the step replayed on meta tensors (the cost model; nothing ran)"
                                      : "traced warm-ups (no cap)",
                       human_bytes(std::uint64_t(plan.non_model_one)), human_bytes(std::uint64_t(plan.non_model_two)),
                       human_bytes(std::uint64_t(std::max<std::int64_t>(0, plan.non_model_two - plan.non_model_one))));
  out += fmt::format("{:>6} {:>12} {:>11} {:>12} {:>12} {:>12} {:>14}  {}\n", "layers", "parameters", "chunk size",
                     "model data", "host needs", "disk needs", "device needs", "fits");
  for (const PlanRow& r : plan.rows)
    out += fmt::format("{:>6} {:>12} {:>11} {:>12} {:>12} {:>12} {:>14}  {}\n", r.layers, r.parameters, r.chunk_size,
                       human_bytes(std::uint64_t(r.model_data_bytes)), human_bytes(std::uint64_t(r.host_needs)),
                       human_bytes(std::uint64_t(r.disk_needs)),
                       human_bytes(std::uint64_t(r.device_needs)) + (r.traced ? "*" : " "),
                       r.fits() ? "yes" : !r.fits_host && !r.fits_device ? "no: host and device"
                                        : !r.fits_host                  ? "no: host"
                                                                        : "no: device");
  const PlanRow& last = plan.rows.back();
  out += fmt::format("\nlargest: {} layers ({} parameters)", plan.largest, std::find_if(plan.rows.begin(), plan.rows.end(), [&](const PlanRow& r) { return r.layers == plan.largest; })->parameters);
  if (!last.fits())
    out += fmt::format("; {} layers need {} on the {}, over memory.{}_limit = {}\n", last.layers,
                       human_bytes(std::uint64_t(last.fits_host ? last.device_needs : last.host_needs)),
                       last.fits_host ? "device tier" : "host", last.fits_host ? "device" : "host",
                       human_bytes(last.fits_host ? plan.device_limit : plan.host_limit));
  else
    out += fmt::format(" (--max-layers reached)\n");
  out += fmt::format("train it with --set model.n_layer={}\n", plan.largest);
  if (std::any_of(plan.rows.begin(), plan.rows.end(), [](const PlanRow& r) { return r.traced; }))
    out += plan.ranks > 1 ? "(* traced: that model's warm-up under the layout and the device cap gives the least "
                            "memory.device_limit it trains under)\n"
                          : "(* traced: the warm-up of that model, run without caps at its chunk size, gives the least "
                            "memory.device_limit it trains under)\n";
  return out;
}

}  // namespace tidal::engine
