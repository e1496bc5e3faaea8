// `tidal train`: a run of the config on the launch's ranks through engine::Trainer, with
// --metrics, --tensorboard, --resume and --stop-after. This file owns the options and help text;
// the work is in engine/.
#pragma once

#include "cli/config_args.h"
#include "engine/launch.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace tidal::cli {

struct TrainCommand {
  CLI::App* app = nullptr;
  ConfigArgs config;
  std::string metrics_path, resume_path, tensorboard_dir;
  std::int64_t stop_after = 0;
  bool print_config = false;
};

void add_train_command(CLI::App& app, TrainCommand& cmd);
// `shared` turns false once every rank has its layout: errors from there on are this rank's own.
void run_train_command(TrainCommand& cmd, engine::Launch& launch, bool& shared);

}  // namespace tidal::cli
