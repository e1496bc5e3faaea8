// `tidal calibrate`: measures this machine (GEMM rates, memory bandwidth, the links between the
// launched ranks) and writes it as a hardware file for the cost model (sim/calibrate.h). This
// file owns the command's options, help and output.
#pragma once

#include "engine/launch.h"

#include <CLI/CLI.hpp>

#include <string>

namespace tidal::cli {

struct CalibrateCommand {
  CLI::App* app = nullptr;
  std::string out = "hardware.toml";
  bool quick = false;
  std::string disk_dir = ".";
};

void add_calibrate_command(CLI::App& app, CalibrateCommand& cmd);
void run_calibrate_command(const CalibrateCommand& cmd, engine::Launch& launch);

}  // namespace tidal::cli
