// The tidal command's subcommands: builds the argument parser from each command's file, parses,
// and runs the one named. User errors (tidal::Error) print one line and exit with code 2;
// internal errors exit with code 3. Errors every rank meets alike (arguments, config, layout)
// are printed by rank 0 alone; after that, each rank prints its own and ends the job.
#include "cli/commands.h"

#include "cli/calibrate_command.h"
#include "cli/checkpoint_command.h"
#include "cli/data_command.h"
#include "cli/export_command.h"
#include "cli/memory_commands.h"
#include "cli/sample_command.h"
#include "cli/tokenize_command.h"
#include "cli/train_command.h"
#include "core/blas_kernels.h"
#include "core/error.h"
#include "core/gpu.h"
#include "ops/cpu/sgemm.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <omp.h>


namespace tidal::cli {
namespace {

void print_info() {
  fmt::print("tidal {}\n", TIDAL_VERSION);
  fmt::print("  build switches: TIDAL_CUDA={} TIDAL_MPI={} TIDAL_NCCL={} TIDAL_CUDNN={}\n", TIDAL_CUDA ? "on" : "off",
             TIDAL_MPI ? "on" : "off", TIDAL_NCCL ? "on" : "off", TIDAL_CUDNN ? "on" : "off");
  fmt::print("  cpu threads: {} (OMP_NUM_THREADS)\n", omp_get_max_threads());
  fmt::print("  OpenBLAS kernels: {}\n", blas_kernel_name());
  fmt::print("  CPU GEMM: {}\n", ops::cpu::cpu_gemm_library());
  fmt::print("  gpu: {}{}\n", gpu_description(), gpu_available() ? " (train with --set train.device=cuda)" : "");
}

}  // namespace

int run(int argc, char** argv, engine::Launch& launch) {
  CLI::App app{
      "tidal trains transformer models (GPT, BERT, ViT, Llama, Qwen2, and Mixtral and Qwen2-MoE mixtures of experts) on one device or many.\n"
      "Run `tidal <command> --help` for a command's options."};
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  tidal train                           # a small GPT on the built-in Markov language, ~1 minute\n"
      "  tidal train -c gpt.toml --set train.steps=1000 --metrics run.jsonl\n"
      "  tidal train -c configs/llama-tiny.toml  # a small Llama (RMSNorm, rotary, grouped-query, SwiGLU)\n"
      "  tidal train -c configs/mixtral-tiny.toml  # a small Mixtral: 8 experts, 2 a token\n"
      "  tidal train --set model.init_from=gpt2   # start from a Hugging Face GPT-2, BERT, ViT, Llama, Mixtral ... directory\n"
      "  tidal tokenize / sample / export      # text to tokens, a model to text, a checkpoint to Hugging Face\n"
      "  tidal data -c sft.toml                # the samples a run trains on, trained targets marked\n"
      "  tidal checkpoint inspect ckpt          # a checkpoint's step, layout, files per rank, checksums\n"
      "  tidal trace / chunk-search / plan     # size a run beyond the device's memory (docs/memory.md)\n"
      "  tidal plan --world 8 --hardware configs/hardware/h100-8x.toml   # every layout of 8 ranks, ranked\n"
      "  mpirun -np 2 tidal calibrate          # measure this machine for the cost model (a hardware file)\n"
      "  tidal info                            # what this build supports");
  CLI::App* info = app.add_subcommand("info", "Print the build's switches, threads and BLAS kernels");
  SampleCommand sample;
  add_sample_command(app, sample);
  TokenizeCommand tokenize;
  add_tokenize_command(app, tokenize);
  DataCommand data;
  add_data_command(app, data);
  TrainCommand train;
  add_train_command(app, train);
  ChunkSearchCommand search;
  add_chunk_search_command(app, search);
  TraceCommand trace;
  add_trace_command(app, trace);
  PlanCommand plan;
  add_plan_command(app, plan);
  ExportCommand export_cmd;
  add_export_command(app, export_cmd);
  CalibrateCommand calibrate;
  add_calibrate_command(app, calibrate);
  CheckpointCommand checkpoint;
  add_checkpoint_command(app, checkpoint);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (!launch.is_main()) return e.get_exit_code() == 0 ? 0 : 2;
    return app.exit(e) == 0 ? 0 : 2;
  }
  bool shared = true;  // an error now is every rank's (arguments, config, layout)
  return launch.run(
      [&] {
        ops::cpu::cpu_gemm_library();  // settles TIDAL_CPU_GEMM here, where a bad value is a clear error
        if (info->parsed()) print_info();
        if (sample.app->parsed() && launch.is_main()) run_sample_command(sample);
        if (tokenize.app->parsed()) run_tokenize_command(tokenize);
        if (data.app->parsed() && launch.is_main()) run_data_command(data);
        if (export_cmd.app->parsed()) run_export_command(export_cmd, launch);
        if (checkpoint.app->parsed() && launch.is_main()) run_checkpoint_command(checkpoint);
        if (trace.app->parsed()) run_trace_command(trace, launch);
        if (plan.app->parsed()) run_plan_command(plan, launch);
        if (search.app->parsed()) run_chunk_search_command(search, launch);
        if (calibrate.app->parsed()) run_calibrate_command(calibrate, launch);
        if (train.app->parsed()) run_train_command(train, launch, shared);
      },
      &shared);
}

}  // namespace tidal::cli
