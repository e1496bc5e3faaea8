// `tidal data`: what a run trains on, as the model reads it: the config's dataset described, then
// samples as text (with data.tokenizer) or ids, the tokens that are trained targets marked, each
// document apart; or as JSON lines of ids, targets and positions. The check of a chat template's
// loss mask or a packing before a long run. This file owns the options, the help text and what
// the command prints.
#pragma once

#include "cli/config_args.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace tidal::cli {

struct DataCommand {
  CLI::App* app = nullptr;
  ConfigArgs config;
  std::int64_t samples = 2, first = 0;
  std::string split = "train";
  bool json = false;
};

void add_data_command(CLI::App& app, DataCommand& cmd);
void run_data_command(const DataCommand& cmd);

}  // namespace tidal::cli
