// `tidal export`: a checkpoint as a Hugging Face model directory (engine/hf_checkpoint.h), or its
// LoRA adapters as PEFT's (engine/finetune.h). This
// file owns the options, the help text and what the command prints.
#pragma once

#include "engine/launch.h"

#include <CLI/CLI.hpp>

#include <string>

namespace tidal::cli {

struct ExportCommand {
  CLI::App* app = nullptr;
  std::string format = "hf", checkpoint, out;
  double max_shard_gb = 2.0;
  bool merge = false;
};

void add_export_command(CLI::App& app, ExportCommand& cmd);
void run_export_command(const ExportCommand& cmd, engine::Launch& launch);

}  // namespace tidal::cli
