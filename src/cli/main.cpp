// The tidal command. Thin: parses arguments and calls the engine. User errors (tidal::Error)
// print one line and exit with code 2; internal errors exit with code 3.
#include "config/config.h"
#include "config/schema.h"
#include "core/blas_kernels.h"
#include "core/error.h"
#include "engine/trainer.h"
#include "parallel/context.h"
#if TIDAL_MPI
#include "comm/mpi_runtime.h"
#endif

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

namespace {

void print_info() {
  fmt::print("tidal {}\n", TIDAL_VERSION);
  fmt::print("  build switches: TIDAL_CUDA={} TIDAL_MPI={}\n", TIDAL_CUDA ? "on" : "off", TIDAL_MPI ? "on" : "off");
  fmt::print("  cpu threads: {} (OMP_NUM_THREADS)\n", omp_get_max_threads());
  fmt::print("  OpenBLAS kernels: {}\n", tidal::blas_kernel_name());
}

std::string config_reference() {
  std::string out = "Config keys (TOML sections; any key can be overridden with --set section.key=value):\n";
  const tidal::config::Config defaults;
  for (const auto& k : tidal::config::schema()) {
    out += fmt::format("  {:<28} {} (default {})\n", k.name, k.help, tidal::config::format_value(k.get(defaults)));
  }
  return out;
}

// Ranks sharing a node share its cores: without OMP_NUM_THREADS, each takes its share.
void share_cores(int ranks_on_node) {
  if (std::getenv("OMP_NUM_THREADS") || ranks_on_node <= 1) return;
  const int cores = int(std::thread::hardware_concurrency());
  omp_set_num_threads(std::max(1, cores / ranks_on_node));
}

}  // namespace

int main(int argc, char** argv) {
  tidal::select_blas_kernels(argv);
  CLI::App app{
      "tidal trains transformer models (GPT, BERT, ViT) on one device or many.\n"
      "Run `tidal <command> --help` for a command's options."};
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  tidal train                           # a small GPT on the built-in Markov language, ~1 minute\n"
      "  tidal train -c gpt.toml --set train.steps=1000 --metrics run.jsonl\n"
      "  tidal info                            # what this build supports");

  auto* info = app.add_subcommand("info", "Print the build's switches, threads and BLAS kernels");

  auto* train = app.add_subcommand("train", "Train a model (defaults: a small GPT on the built-in Markov language)");
  std::string config_path, metrics_path, resume_path;
  std::vector<std::string> overrides;
  std::int64_t stop_after = 0;
  bool print_config = false;
  train->add_option("-c,--config", config_path, "TOML config file (missing keys take their defaults)");
  train->add_option("--set", overrides, "Override one key, e.g. --set train.steps=100 --set model.type=bert")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  train->add_option("--metrics", metrics_path, "Append JSON lines (one per step, then a summary) to this file");
  train->add_option("--resume", resume_path, "Continue from a checkpoint directory (or one of its step-* directories)");
  train->add_option("--stop-after", stop_after,
                    "End after step N as an interruption would (the schedule still assumes train.steps); writes a "
                    "checkpoint when checkpoint.dir is set")
      ->type_name("N");
  train->add_flag("--print-config", print_config, "Print the resolved configuration as TOML and exit");
  train->footer(config_reference() +
                "\nExamples:\n"
                "  tidal train --set checkpoint.dir=ckpt --stop-after 10   # stop at step 10 with a checkpoint\n"
                "  tidal train --set checkpoint.dir=ckpt --resume ckpt     # ... and continue, bitwise identically\n"
                "  tidal train --set model.type=bert --set model.n_layer=4 --metrics bert.jsonl");

#if TIDAL_MPI
  // Under mpirun / srun every rank runs this same command; MPI starts before anything else.
  std::unique_ptr<tidal::comm::MpiRuntime> mpi;
  if (tidal::comm::MpiRuntime::launched()) {
    mpi = std::make_unique<tidal::comm::MpiRuntime>(&argc, &argv);
    share_cores(mpi->local_size());
  }
  const int rank = mpi ? mpi->world_rank() : 0;
  const std::string on_rank = mpi && mpi->world_size() > 1 ? fmt::format(" on rank {}", rank) : "";
  // A failure on one rank must end the others: they would wait in a collective for it.
  auto fail = [&](int code) {
    if (mpi && mpi->world_size() > 1) mpi->abort(code);
    return code;
  };
#else
  const int rank = 0;
  const std::string on_rank;
  auto fail = [](int code) { return code; };
#endif
  // Errors every rank meets identically (arguments, config, layout) are printed by rank 0.
  bool shared_phase = true;
  try {
    app.parse(argc, argv);
    if (info->parsed()) print_info();
    if (train->parsed()) {
      TIDAL_CHECK(stop_after >= 0, "--stop-after must be a step number >= 1, got {}", stop_after);
      const tidal::config::Config cfg = tidal::config::load_config(config_path, overrides);
      if (print_config) {
        if (rank == 0) fmt::print("{}", tidal::config::to_toml(cfg));
        return 0;
      }
#if TIDAL_MPI
      tidal::parallel::ParallelContext pc(cfg, mpi.get());
#else
      tidal::parallel::ParallelContext pc(cfg, nullptr);
#endif
      shared_phase = false;
      tidal::engine::train(cfg, {.metrics_path = metrics_path, .resume_path = resume_path, .stop_after = stop_after},
                           pc);
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
    return fail(2);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "tidal: internal error{} (a bug; please report it): {}\n", on_rank, e.what());
    return fail(3);
  }
}
