// `tidal checkpoint inspect | consolidate`: a checkpoint seen from outside a run
// (engine/checkpoint/inspect.h). This file owns the options, the help text and what the command
// prints.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace tidal::cli {

struct CheckpointCommand {
  CLI::App* app = nullptr;
  CLI::App* inspect = nullptr;
  CLI::App* consolidate = nullptr;
  std::string checkpoint, out;
  bool json = false, no_verify = false;
};

void add_checkpoint_command(CLI::App& app, CheckpointCommand& cmd);
void run_checkpoint_command(const CheckpointCommand& cmd);

}  // namespace tidal::cli
