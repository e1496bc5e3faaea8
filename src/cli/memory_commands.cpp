#include "cli/memory_commands.h"

#include "core/bytes.h"
#include "engine/planning/chunk_search.h"
#include "engine/planning/job.h"
#include "engine/planning/memory_plan.h"
#include "engine/planning/planner.h"
#include "engine/planning/tide.h"
#include "sim/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>

namespace tidal::cli {

void add_chunk_search_command(CLI::App& app, ChunkSearchCommand& cmd) {
  CLI::App* search = app.add_subcommand(
      "chunk-search", "Lay the model's parameters out in chunks of each size in a range: fragmentation, utilisation, "
                      "the best size (PatrickStar's search; nothing is allocated)");
  cmd.app = search;
  add_config_options(search, cmd.config, "TOML config file (its [model], train.precision, parallel.data)",
                     "model.n_layer=24");
  search->add_option("--from", cmd.from, "Smallest chunk size, in elements (default: the largest parameter)");
  search->add_option("--to", cmd.to, "Largest chunk size, in elements (default: 4x the largest parameter)");
  search->add_option("--step", cmd.step, "Step between sizes, in elements (default: 1/32 of the largest parameter)");
  search->add_flag("--json", cmd.json, "Print the report as one JSON object");
  search->footer(
      "Fragmentation: chunk space that holds no parameter (a parameter never straddles chunks, so a chunk's tail "
      "stays empty when the next one does not fit). Utilisation: the share that parameters fill (patrickstar-v2 "
      "Table 3). Chunk memory: every chunk list of one rank (param, fp32 master, momentum, variance).\n\n"
      "Examples:\n"
      "  tidal chunk-search -c configs/gpt2-small.toml\n"
      "  tidal chunk-search -c configs/gpt2-medium.toml --from 1000000 --to 8000000 --step 250000");
}

void add_trace_command(CLI::App& app, TraceCommand& cmd) {
  CLI::App* trace = app.add_subcommand(
      "trace", "Record the warm-up iteration's memory tide (chunks and non-model data per moment) as JSON and as an "
               "SVG chart");
  cmd.app = trace;
  add_config_options(trace, cmd.config, "TOML config file (the model, batch and [memory] to trace)",
                     "memory.device_limit=32MiB");
  trace->add_option("--out", cmd.json_path, "Where the tide's JSON goes")->capture_default_str();
  trace->add_option("--chart", cmd.chart_path, "Where the chart goes (SVG)")->capture_default_str();
  trace->footer(
      "Trains one step - the warm-up, which the memory tracer records - under memory.offload (\"chunk\" unless "
      "set). Without memory.device_limit the device tier has no cap and the tide shows what the model needs; with "
      "one, the chunks keep to the warm-up's share of it (memory.warmup_fraction) and are evicted in list order.\n\n"
      "Examples:\n"
      "  tidal trace --set model.n_layer=4 --set model.n_embd=384 --set train.batch_size=2 --set model.seq_len=32\n"
      "  tidal trace -c gpt.toml --set memory.device_limit=32MiB --chart docs/tide.svg");
}

void add_plan_command(CLI::App& app, PlanCommand& cmd) {
  CLI::App* plan = app.add_subcommand(
      "plan", "The largest model of the configured width (layers added one at a time) that trains within "
              "memory.device_limit and memory.host_limit; with --world N, every layout of N ranks ranked by the cost "
              "model (memory per rank, step time)");
  cmd.app = plan;
  add_config_options(plan, cmd.config, "TOML config file (the model's width, the batch, [memory])",
                     "memory.host_limit=1GiB");
  plan->add_option("--max-layers", cmd.max_layers, "Stop the search here")->capture_default_str();
  plan->add_flag("--json", cmd.json, "Print the plan as one JSON object (with --world: one JSON line per layout)");
  plan->add_option("--world", cmd.world,
                   "Predict instead: every layout of this many ranks (data x pipeline x tensor mode and size x "
                   "sequence x zero.stage, 2.5D and 3D with and without parallel.tensor.keep_gathered, a "
                   "mixture's parallel.expert groups of the data ranks) for the "
                   "configured model, with each rank's peak memory and the step time, ranked. Each layout gets the "
                   "choices that run it fastest within 95% of the device's memory: a pipeline's micro-batches "
                   "where train.micro_batch_size is unset; where it does not fit as configured, activation "
                   "checkpointing and more micro-batches");
  plan->add_option("--hardware", cmd.hardware,
                   "The machine (configs/hardware/*.toml, or `tidal calibrate`'s file). With --world: its rates and "
                   "memory (without it only memory is predicted). Without --world: the largest model for its device "
                   "and host (the caps where memory.device_limit and memory.host_limit are unset), each row's "
                   "activations from the cost model's step on meta tensors instead of a traced warm-up, so a model "
                   "far larger than this machine is planned");
  plan->add_flag("--explain", cmd.explain, "With --world: the terms of each layout's prediction");
  plan->add_flag("--configured", cmd.configured, "With --world: the config's own [parallel] layout alone");
  plan->footer(
      "The host holds every chunk at the start and through the warm-up, so it needs the chunk lists' bytes (exact, "
      "from the layout). The device tier needs, at every moment, an operator's chunks (at most two) beside the "
      "non-model data, whose peak two traced warm-ups (1 and 2 layers, no cap) give per layer. Check an answer by "
      "training it 2 steps under the same caps: it runs, and one layer more stops with an out-of-memory error "
      "(tests/cli/check_memory_tools.sh does both).\n\n"
      "Example:\n"
      "  tidal plan --set model.n_embd=256 --set model.n_head=4 --set model.seq_len=32 --set train.batch_size=2 "
      "--set memory.offload=chunk --set memory.device_limit=24MiB --set memory.host_limit=96MiB\n\n"
      "With --world N it is the cost model instead (nothing runs): for every way to split the configured model over "
      "N ranks, each rank's model data as the run lays it out (exact: the same chunk layout code, the same chunk "
      "size search), its activations from the real modules run on shape-only (meta) tensors as they allocate, "
      "and the step's time from the GEMMs' FLOPs at the hardware file's rates (by the products' sizes, "
      "attention's by its keys) and each collective's bytes over its links (the gradients' reductions hide behind backward, but the last bucket's or chunk "
      "group's); ranked by step time, those that do not fit the device's memory last. How close it comes (peaks "
      "within 5%, step times within 20% on a CPU, each collective's bytes exact) and how that is measured: "
      "docs/cost_model.md.\n"
      "  tidal plan -c configs/gpt2-small.toml --world 8 --hardware configs/hardware/h100-8x.toml\n"
      "  tidal plan -c configs/gpt2-small.toml --world 8 --hardware configs/hardware/h100-8x.toml --configured "
      "--set parallel.tensor.size=8 --explain");
}

void run_chunk_search_command(const ChunkSearchCommand& cmd, engine::Launch& launch) {
  const engine::ChunkSearch report =
      engine::chunk_search(cmd.config.load(), {.from = cmd.from, .to = cmd.to, .step = cmd.step}, launch.mpi());
  if (launch.is_main()) fmt::print("{}", cmd.json ? report.json().dump() + "\n" : engine::format_chunk_search(report));
}

void run_trace_command(const TraceCommand& cmd, engine::Launch& launch) {
  const nlohmann::json tide = engine::trace_warmup(cmd.config.load(), launch.mpi());
  const int ranks = launch.world_size(), rank = launch.rank();
  // Under several ranks each rank's tide goes in files of its own: tide.json -> tide-rank3.json.
  auto of_rank = [&](const std::string& path) {
    if (ranks == 1) return path;
    const std::filesystem::path p(path);
    return (p.parent_path() / (p.stem().string() + fmt::format("-rank{}", rank) + p.extension().string())).string();
  };
  const std::string json_path = of_rank(cmd.json_path), chart_path = of_rank(cmd.chart_path);
  write_text(json_path, tide.dump(1) + "\n");
  write_text(chart_path, engine::tide_svg(tide));
  std::int64_t peak = 0;
  for (const auto& m : tide["moments"])
    peak = std::max(peak, m["chunk_bytes"].get<std::int64_t>() + m["non_model_bytes"].get<std::int64_t>());
  fmt::print("{}warm-up of {}: {} moments, device peak {}, non-model peak {}, model data {}\nwrote {} and {}\n",
             ranks > 1 ? fmt::format("rank {}: ", rank) : "", tide["model"].get<std::string>(), tide["moments"].size(),
             human_bytes(std::uint64_t(peak)),
             human_bytes(tide["peak_non_model_bytes"].get<std::uint64_t>()),
             human_bytes(tide["model_data_bytes"].get<std::uint64_t>()), json_path, chart_path);
}

namespace {

void run_cost_model(const PlanCommand& cmd) {
  const config::Config cfg = cmd.config.load();
  std::optional<sim::Hardware> hw;
  if (!cmd.hardware.empty()) hw = sim::load_hardware(cmd.hardware);
  const sim::Hardware* hardware = hw ? &*hw : nullptr;
  std::vector<sim::Prediction> predictions;
  if (cmd.configured) {
    predictions.push_back(engine::predict(cfg, cmd.world, hardware));
  } else {
    for (engine::PlannedLayout& planned : engine::plan_layouts(cfg, cmd.world, hardware))
      predictions.push_back(std::move(planned.prediction));
    TIDAL_CHECK(!predictions.empty(), "no layout of {} ranks splits this model (model.n_head, model.n_embd, "
                "train.batch_size must divide as the modes need)", cmd.world);
  }
  std::size_t words = 56;  // the layouts' column, as wide as the longest
  for (const sim::Prediction& p : predictions) words = std::max(words, sim::layout_words(p.layout).size());
  for (std::size_t k = 0; k < predictions.size(); ++k) {
    const sim::Prediction& p = predictions[k];
    if (cmd.json) {
      fmt::print("{}\n", p.json().dump());
    } else {
      const double mfu = hardware && p.time.total() > 0
                             ? p.flops_per_step / p.time.total() / (cmd.world * hardware->peak_flops(cfg.train.precision))
                             : 0.0;
      fmt::print("{:>3}. {:<{}} peak {:>10} (rank {}){}{}\n", k + 1, sim::layout_words(p.layout), words,
                 human_bytes(std::uint64_t(p.peak_bytes)), p.largest_rank,
                 hardware ? fmt::format("  step {:.4g} s{}, MFU {:.0f}%", p.time.total(),
                                        p.untimed.empty() ? "" : " (not timed: " + p.untimed + ")", 100 * mfu)
                          : std::string(),
                 p.fits ? "" : "  does not fit: " + p.does_not_fit);
    }
    if (cmd.explain) fmt::print("{}", sim::explain(p, hardware));
  }
  // Nothing fits, not with recomputation or more micro-batches (and, where the planner may offer it,
  // not with offload): what is left.
  if (!cmd.json && !cmd.configured && !predictions.front().fits && cfg.memory.offload == config::Offload::none) {
    const std::string none = predictions.size() == 1 ? std::string("the only layout does not fit")
                                                     : fmt::format("none of the {} layouts fits", predictions.size());
    if (engine::offload_plannable(hardware))
      fmt::print("{}, not even with memory.offload = \"chunk\" (the activations beside an operator's chunks fill "
                 "the device): more ranks, or a smaller train.micro_batch_size\n",
                 none);
    else
      fmt::print("{}: memory.offload = \"chunk\" keeps the model data that does not fit on the host (the planner "
                 "offers it only on a GPU whose hardware file gives the host's AdamW rate, host.optimizer_gbps); for "
                 "its memory, add to this command --configured --set memory.offload=chunk{} and the layout's keys\n",
                 none, hardware && hardware->device == Device::Kind::cuda ? " --set train.device=cuda" : "");
  }
}

}  // namespace

void run_plan_command(const PlanCommand& cmd, engine::Launch& launch) {
  TIDAL_CHECK(cmd.world > 0 || cmd.app->count("--world") == 0,
              "--world takes the number of ranks to plan for, 1 or more; got {}", cmd.world);
  if (cmd.world > 0) {
    if (launch.is_main()) run_cost_model(cmd);
    return;
  }
  TIDAL_CHECK(!cmd.explain && !cmd.configured, "--explain and --configured go with --world N (the cost model)");
  std::optional<sim::Hardware> hw;
  if (!cmd.hardware.empty()) hw = sim::load_hardware(cmd.hardware);
  const engine::MemoryPlan p =
      engine::plan_memory(cmd.config.load(), cmd.max_layers, launch.mpi(), hw ? &*hw : nullptr);
  if (launch.is_main()) fmt::print("{}", cmd.json ? p.json().dump() + "\n" : engine::format_memory_plan(p));
}

}  // namespace tidal::cli
