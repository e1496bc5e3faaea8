// The tidal command. Thin: parses arguments and calls the engine. User errors (tidal::Error)
// print one line and exit with code 2; internal errors exit with code 3.
#include "cli/sample_command.h"
#include "cli/tokenize_command.h"
#include "config/config.h"
#include "config/schema.h"
#include "core/blas_kernels.h"
#include "core/error.h"
#include "core/gpu.h"
#include "io/atomic_file.h"
#include "engine/chunk_search.h"
#include "engine/hf_checkpoint.h"
#include "engine/launch.h"
#include "engine/memory_plan.h"
#include "engine/progress.h"
#include "engine/tide.h"
#include "engine/trainer.h"
#include "ops/cpu/onednn_matmul.h"
#include "parallel/context.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace {

void write_text(const std::string& path, const std::string& text) {
  tidal::io::AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

// A subcommand's config: a TOML file and --set overrides.
struct ConfigArgs {
  std::string path;
  std::vector<std::string> overrides;
  tidal::config::Config load() const { return tidal::config::load_config(path, overrides); }
};

void add_config_options(CLI::App* cmd, ConfigArgs& args, const std::string& file_help, const std::string& example) {
  cmd->add_option("-c,--config", args.path, file_help);
  cmd->add_option("--set", args.overrides, "Override one key, e.g. --set " + example)
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

void print_info() {
  fmt::print("tidal {}\n", TIDAL_VERSION);
  fmt::print("  build switches: TIDAL_CUDA={} TIDAL_MPI={}\n", TIDAL_CUDA ? "on" : "off", TIDAL_MPI ? "on" : "off");
  fmt::print("  cpu threads: {} (OMP_NUM_THREADS)\n", omp_get_max_threads());
  fmt::print("  OpenBLAS kernels: {}\n", tidal::blas_kernel_name());
  fmt::print("  CPU GEMM: {}\n", tidal::ops::cpu::cpu_gemm_library());
  fmt::print("  gpu: {}{}\n", tidal::gpu_description(),
             tidal::gpu_available() ? " (train with --set train.device=cuda)" : "");
}

std::string config_reference() {
  std::string out = "Config keys (TOML sections; any key can be overridden with --set section.key=value):\n";
  const tidal::config::Config defaults;
  for (const auto& k : tidal::config::schema()) {
    out += fmt::format("  {:<28} {} (default {})\n", k.name, k.help, tidal::config::format_value(k.get(defaults)));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  tidal::select_blas_kernels(argv);
  CLI::App app{
      "tidal trains transformer models (GPT, BERT, ViT, Llama) on one device or many.\n"
      "Run `tidal <command> --help` for a command's options."};
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  tidal train                           # a small GPT on the built-in Markov language, ~1 minute\n"
      "  tidal train -c gpt.toml --set train.steps=1000 --metrics run.jsonl\n"
      "  tidal train -c configs/llama-tiny.toml  # a small Llama (RMSNorm, rotary, grouped-query, SwiGLU)\n"
      "  tidal train --set model.init_from=gpt2   # start from a Hugging Face GPT-2, BERT, ViT or Llama directory\n"
      "  tidal tokenize / sample / export      # text to tokens, a model to text, a checkpoint to Hugging Face\n"
      "  tidal trace / chunk-search / plan     # size a run beyond the device's memory (docs/memory.md)\n"
      "  tidal info                            # what this build supports");

  auto* info = app.add_subcommand("info", "Print the build's switches, threads and BLAS kernels");
  tidal::cli::SampleCommand sample_cmd;
  add_sample_command(app, sample_cmd);
  tidal::cli::TokenizeCommand tokenize_cmd;
  add_tokenize_command(app, tokenize_cmd);

  auto* train = app.add_subcommand("train", "Train a model (defaults: a small GPT on the built-in Markov language)");
  ConfigArgs train_args;
  std::string metrics_path, resume_path, tensorboard_dir;
  std::int64_t stop_after = 0;
  bool print_config = false;
  add_config_options(train, train_args, "TOML config file (missing keys take their defaults)",
                     "train.steps=100 --set model.type=bert");
  train->add_option("--metrics", metrics_path, "Append JSON lines (one per step, then a summary) to this file");
  train->add_option("--tensorboard", tensorboard_dir,
                    "Write the metrics as TensorBoard event files into this directory (train.tensorboard_dir); "
                    "then: tensorboard --logdir DIR");
  train->add_option("--resume", resume_path, "Continue from a checkpoint directory (or one of its step-* directories)");
  train->add_option("--stop-after", stop_after,
                    "End after step N as an interruption would (the schedule still assumes train.steps); writes a "
                    "checkpoint when checkpoint.dir is set (with --resume at the checkpoint's own step: no step runs, "
                    "and the checkpoint is written again as this layout loaded it)")
      ->type_name("N");
  train->add_flag("--print-config", print_config, "Print the resolved configuration as TOML and exit");
  train->footer(config_reference() +
                "\nExamples:\n"
                "  tidal train --set checkpoint.dir=ckpt --stop-after 10   # stop at step 10 with a checkpoint\n"
                "  tidal train --set checkpoint.dir=ckpt --resume ckpt     # ... and continue, bitwise identically\n"
                "  tidal train --set model.type=bert --set model.n_layer=4 --metrics bert.jsonl");

  auto* search = app.add_subcommand(
      "chunk-search", "Lay the model's parameters out in chunks of each size in a range: fragmentation, utilisation, "
                      "the best size (PatrickStar's search; nothing is allocated)");
  ConfigArgs search_args;
  std::int64_t search_from = 0, search_to = 0, search_step = 0;
  bool search_json = false;
  add_config_options(search, search_args, "TOML config file (its [model], train.precision, parallel.data)",
                     "model.n_layer=24");
  search->add_option("--from", search_from, "Smallest chunk size, in elements (default: the largest parameter)");
  search->add_option("--to", search_to, "Largest chunk size, in elements (default: 4x the largest parameter)");
  search->add_option("--step", search_step, "Step between sizes, in elements (default: 1/32 of the largest parameter)");
  search->add_flag("--json", search_json, "Print the report as one JSON object");
  search->footer(
      "Fragmentation: chunk space that holds no parameter (a parameter never straddles chunks, so a chunk's tail "
      "stays empty when the next one does not fit). Utilisation: the share that parameters fill (patrickstar-v2 "
      "Table 3). Chunk memory: every chunk list of one rank (param, fp32 master, momentum, variance).\n\n"
      "Examples:\n"
      "  tidal chunk-search -c configs/gpt2-small.toml\n"
      "  tidal chunk-search -c configs/gpt2-medium.toml --from 1000000 --to 8000000 --step 250000");

  auto* trace = app.add_subcommand(
      "trace", "Record the warm-up iteration's memory tide (chunks and non-model data per moment) as JSON and as an "
               "SVG chart");
  ConfigArgs trace_args;
  std::string tide_json = "tide.json", tide_chart = "tide.svg";
  add_config_options(trace, trace_args, "TOML config file (the model, batch and [memory] to trace)",
                     "memory.device_limit=32MiB");
  trace->add_option("--out", tide_json, "Where the tide's JSON goes")->capture_default_str();
  trace->add_option("--chart", tide_chart, "Where the chart goes (SVG)")->capture_default_str();
  trace->footer(
      "Trains one step - the warm-up, which the memory tracer records - under memory.offload (\"chunk\" unless "
      "set). Without memory.device_limit the device tier has no cap and the tide shows what the model needs; with "
      "one, the chunks keep to the warm-up's share of it (memory.warmup_fraction) and are evicted in list order.\n\n"
      "Examples:\n"
      "  tidal trace --set model.n_layer=4 --set model.n_embd=384 --set train.batch_size=2 --set model.seq_len=32\n"
      "  tidal trace -c gpt.toml --set memory.device_limit=32MiB --chart docs/tide.svg");

  auto* plan = app.add_subcommand(
      "plan", "The largest model of the configured width (layers added one at a time) that trains within "
              "memory.device_limit and memory.host_limit");
  ConfigArgs plan_args;
  int plan_max_layers = 256;
  bool plan_json = false;
  add_config_options(plan, plan_args, "TOML config file (the model's width, the batch, [memory])",
                     "memory.host_limit=1GiB");
  plan->add_option("--max-layers", plan_max_layers, "Stop the search here")->capture_default_str();
  plan->add_flag("--json", plan_json, "Print the plan as one JSON object");
  plan->footer(
      "The host holds every chunk at the start and through the warm-up, so it needs the chunk lists' bytes (exact, "
      "from the layout). The device tier needs, at every moment, an operator's chunks (at most two) beside the "
      "non-model data, whose peak two traced warm-ups (1 and 2 layers, no cap) give per layer. Check an answer by "
      "training it 2 steps under the same caps: it runs, and one layer more stops with an out-of-memory error "
      "(tests/cli/check_memory_tools.sh does both).\n\n"
      "Example:\n"
      "  tidal plan --set model.n_embd=256 --set model.n_head=4 --set model.seq_len=32 --set train.batch_size=2 "
      "--set memory.offload=chunk --set memory.device_limit=24MiB --set memory.host_limit=96MiB");

  auto* export_cmd = app.add_subcommand(
      "export", "Write a checkpoint as a Hugging Face model directory (config.json + model.safetensors) that "
                "transformers' from_pretrained opens");
  std::string export_format = "hf", export_checkpoint, export_out;
  double export_shard_gb = 2.0;
  export_cmd->add_option("--format", export_format, "Output format (hf: a Hugging Face directory)")
      ->check(CLI::IsMember({"hf"}))
      ->capture_default_str();
  export_cmd->add_option("CHECKPOINT", export_checkpoint, "A checkpoint directory (its latest step) or a step-* directory")
      ->required();
  export_cmd->add_option("OUT_DIR", export_out, "Where the Hugging Face directory goes (created)")->required();
  export_cmd->add_option("--max-shard-gb", export_shard_gb,
                         "Above this many GB (2^30 bytes) the weights go in numbered shards with an index")
      ->capture_default_str();
  export_cmd->footer(
      "The model's architecture comes from the config stored in the checkpoint: gpt -> GPT2LMHeadModel, bert -> "
      "BertForMaskedLM, vit -> ViTForImageClassification, llama -> LlamaForCausalLM, with tidal's weights in "
      "Hugging Face's names and layouts (GPT-2's Conv1D weights transposed, BERT's, ViT's and Llama's q, k, v "
      "apart, Llama's gate and up apart). Weights are fp32.\n\n"
      "Examples:\n"
      "  tidal export --format hf ckpt hf-out        # then: GPT2LMHeadModel.from_pretrained(\"hf-out\")\n"
      "  tidal export ckpt/step-00001000 hf-1000");

  // Under mpirun / srun every rank runs this same command; MPI starts before anything else.
  tidal::engine::Launch launch(&argc, &argv);
  const int rank = launch.rank();
  const std::string on_rank = launch.world_size() > 1 ? fmt::format(" on rank {}", rank) : "";
  // Errors every rank meets identically (arguments, config, layout) are printed by rank 0.
  bool shared_phase = true;
  try {
    app.parse(argc, argv);
    if (info->parsed()) print_info();
    if (sample_cmd.app->parsed() && rank == 0) run_sample_command(sample_cmd);
    if (tokenize_cmd.app->parsed()) run_tokenize_command(tokenize_cmd);
    if (export_cmd->parsed() && rank == 0) {
      TIDAL_CHECK(export_shard_gb > 0, "--max-shard-gb must be > 0, got {}", export_shard_gb);
      const auto r = tidal::engine::export_hf(export_checkpoint, export_out,
                                              std::uint64_t(export_shard_gb * double(std::uint64_t(1) << 30)));
      fmt::print("exported {} as {}: {} tensors, {} in {} file{} + config.json\n", export_checkpoint, r.architecture,
                 r.tensors, tidal::engine::human_bytes(r.bytes), r.files, r.files > 1 ? "s (with an index)" : "");
    }
    if (trace->parsed()) {
      const tidal::config::Config cfg = trace_args.load();
      const nlohmann::json tide = tidal::engine::trace_warmup(cfg, launch.mpi());
      const int ranks = launch.world_size();
      if (ranks > 1) {  // each rank's tide in files of its own: tide.json -> tide-rank3.json
        auto of_rank = [&](const std::string& path) {
          const std::filesystem::path p(path);
          return (p.parent_path() / (p.stem().string() + fmt::format("-rank{}", rank) + p.extension().string())).string();
        };
        tide_json = of_rank(tide_json);
        tide_chart = of_rank(tide_chart);
      }
      write_text(tide_json, tide.dump(1) + "\n");
      write_text(tide_chart, tidal::engine::tide_svg(tide));
      std::int64_t peak = 0;
      for (const auto& m : tide["moments"])
        peak = std::max(peak, m["chunk_bytes"].get<std::int64_t>() + m["non_model_bytes"].get<std::int64_t>());
      fmt::print("{}warm-up of {}: {} moments, device peak {}, non-model peak {}, model data {}\nwrote {} and {}\n",
                 ranks > 1 ? fmt::format("rank {}: ", rank) : "", tide["model"].get<std::string>(), tide["moments"].size(), tidal::engine::human_bytes(std::uint64_t(peak)),
                 tidal::engine::human_bytes(tide["peak_non_model_bytes"].get<std::uint64_t>()),
                 tidal::engine::human_bytes(tide["model_data_bytes"].get<std::uint64_t>()), tide_json, tide_chart);
    }
    if (plan->parsed()) {
      const tidal::config::Config cfg = plan_args.load();
      const tidal::engine::MemoryPlan p = tidal::engine::plan_memory(cfg, plan_max_layers, launch.mpi());
      if (rank == 0) fmt::print("{}", plan_json ? p.json().dump() + "\n" : tidal::engine::format_memory_plan(p));
    }
    if (search->parsed()) {
      const tidal::config::Config cfg = search_args.load();
      const tidal::engine::ChunkSearch report = tidal::engine::chunk_search(
          cfg, {.from = search_from, .to = search_to, .step = search_step}, launch.mpi());
      if (rank == 0) fmt::print("{}", search_json ? report.json().dump() + "\n" : tidal::engine::format_chunk_search(report));
    }
    if (train->parsed()) {
      TIDAL_CHECK(stop_after >= 0, "--stop-after must be a step number >= 1, got {}", stop_after);
      if (!tensorboard_dir.empty()) train_args.overrides.push_back("train.tensorboard_dir=" + tensorboard_dir);
      const tidal::config::Config cfg = train_args.load();
      if (print_config) {
        if (rank == 0) fmt::print("{}", tidal::config::to_toml(cfg));
        return 0;
      }
      tidal::parallel::ParallelContext& pc = launch.context(cfg);
      shared_phase = false;
      tidal::engine::Trainer trainer(cfg, pc, {.metrics_path = metrics_path, .stop_after = stop_after});
      if (!resume_path.empty()) trainer.load(resume_path);
      trainer.fit();
    }
    return 0;
  } catch (const CLI::ParseError& e) {
    if (rank != 0) return e.get_exit_code() == 0 ? 0 : 2;
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const tidal::Error& e) {
    std::fflush(stdout);
    if (shared_phase) {
      if (rank == 0) fmt::print(stderr, "tidal: error: {}\n", e.what());
      return 2;
    }
    fmt::print(stderr, "tidal: error{}: {}\n", on_rank, e.what());
    return launch.fail(2);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "tidal: internal error{} (a bug; please report it): {}\n", on_rank, e.what());
    return launch.fail(3);
  }
}
