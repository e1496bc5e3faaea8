#include "cli/train_command.h"

#include "core/error.h"
#include "engine/planning/auto_layout.h"
#include "engine/trainer.h"
#if TIDAL_MPI
#include "comm/mpi_runtime.h"
#endif

#include <fmt/format.h>

namespace tidal::cli {

void add_train_command(CLI::App& app, TrainCommand& cmd) {
  CLI::App* train =
      app.add_subcommand("train", "Train a model (defaults: a small GPT on the built-in Markov language)");
  cmd.app = train;
  add_config_options(train, cmd.config, "TOML config file (missing keys take their defaults)",
                     "train.steps=100 --set model.type=bert");
  train->add_option("--metrics", cmd.metrics_path, "Append JSON lines (one per step, then a summary) to this file");
  train->add_option("--tensorboard", cmd.tensorboard_dir,
                    "Write the metrics as TensorBoard event files into this directory (train.tensorboard_dir); "
                    "then: tensorboard --logdir DIR");
  train->add_option("--resume", cmd.resume_path,
                    "Continue from a checkpoint directory (or one of its step-* directories)");
  train->add_option("--stop-after", cmd.stop_after,
                    "End after step N as an interruption would (the schedule still assumes train.steps); writes a "
                    "checkpoint when checkpoint.dir is set (with --resume at the checkpoint's own step: no step runs, "
                    "and the checkpoint is written again as this layout loaded it)")
      ->type_name("N");
  train->add_flag("--print-config", cmd.print_config, "Print the resolved configuration as TOML and exit");
  train->footer(config_reference() +
                "\nExamples:\n"
                "  tidal train --set checkpoint.dir=ckpt --stop-after 10   # stop at step 10 with a checkpoint\n"
                "  tidal train --set checkpoint.dir=ckpt --resume ckpt     # ... and continue, bitwise identically\n"
                "  tidal train --set model.type=bert --set model.n_layer=4 --metrics bert.jsonl --tensorboard tb\n"
                "  tidal train --set model.init_from=llama-dir --set finetune.method=lora   # LoRA on q_proj, v_proj\n"
                "  tidal train --set model.init_from=llama-dir --set finetune.method=lora --set finetune.base_dtype=nf4 "
                "--set train.precision=bf16   # QLoRA\n"
                "  tidal train --set model.init_from=llama-dir --set finetune.method=lora --set data.kind=chat "
                "--set data.path=chats.jsonl --set data.tokenizer=llama-dir/tokenizer.json   # on the answers alone");
}

void run_train_command(TrainCommand& cmd, engine::Launch& launch, bool& shared) {
  TIDAL_CHECK(cmd.stop_after >= 0, "--stop-after must be a step number >= 1, got {}", cmd.stop_after);
  if (!cmd.tensorboard_dir.empty()) cmd.config.overrides.push_back("train.tensorboard_dir=" + cmd.tensorboard_dir);
  config::Config cfg = cmd.config.load();
  if (cmd.print_config) {
    if (launch.is_main()) fmt::print("{}", config::to_toml(cfg));
    return;
  }
  if (cfg.parallel.auto_layout) {
    std::shared_ptr<comm::Communicator> world;
#if TIDAL_MPI
    if (launch.mpi()) world = launch.mpi()->world(comm::Seconds(cfg.parallel.timeout_s));
#endif
    const engine::AutoLayout chosen = engine::choose_layout(cfg, launch.world_size(), world.get());
    cfg = chosen.cfg;
    if (launch.is_main()) fmt::print("{}\n", chosen.why);
  }
  parallel::ParallelContext& pc = launch.context(cfg);
  shared = false;
  engine::Trainer trainer(cfg, pc, {.metrics_path = cmd.metrics_path, .stop_after = cmd.stop_after});
  if (!cmd.resume_path.empty()) trainer.load(cmd.resume_path);
  trainer.fit();
}

}  // namespace tidal::cli
