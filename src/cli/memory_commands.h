// The commands that size a run beyond the device's memory (docs/memory.md): `tidal chunk-search`
// (chunk sizes and their fragmentation), `tidal trace` (the warm-up's memory tide) and
// `tidal plan` (the largest model that fits the caps; with --world, the cost model's ranking of
// every layout). This file owns their options, help texts
// and output; the work is in engine/.
#pragma once

#include "cli/config_args.h"
#include "engine/launch.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace tidal::cli {

struct ChunkSearchCommand {
  CLI::App* app = nullptr;
  ConfigArgs config;
  std::int64_t from = 0, to = 0, step = 0;
  bool json = false;
};
struct TraceCommand {
  CLI::App* app = nullptr;
  ConfigArgs config;
  std::string json_path = "tide.json", chart_path = "tide.svg";
};
struct PlanCommand {
  CLI::App* app = nullptr;
  ConfigArgs config;
  int max_layers = 256;
  bool json = false;
  // The cost model (sim/cost_model.h): every layout of --world ranks, ranked.
  int world = 0;
  std::string hardware;
  bool explain = false;
  bool configured = false;  // the config's own layout alone
};

void add_chunk_search_command(CLI::App& app, ChunkSearchCommand& cmd);
void add_trace_command(CLI::App& app, TraceCommand& cmd);
void add_plan_command(CLI::App& app, PlanCommand& cmd);
void run_chunk_search_command(const ChunkSearchCommand& cmd, engine::Launch& launch);
void run_trace_command(const TraceCommand& cmd, engine::Launch& launch);
void run_plan_command(const PlanCommand& cmd, engine::Launch& launch);

}  // namespace tidal::cli
