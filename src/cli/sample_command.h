// `tidal sample`: text from a GPT or Llama (a tidal checkpoint or a Hugging Face directory),
// greedy or sampled, streamed as it is generated (engine/inference/sampler.h). This file owns the options, the help
// text and what the command prints; the work is in engine/.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace tidal::cli {

struct SampleCommand {
  CLI::App* app = nullptr;  // the subcommand, once added
  std::string model_dir;    // CHECKPOINT_OR_HF_DIR
  std::string prompt, prompt_ids, tokenizer;
  std::int64_t tokens = 64;
  float temperature = 1.0f;  // 0 = greedy
  std::int64_t top_k = 0;    // 0 = off
  std::uint64_t seed = 1;
  bool print_ids = false;
};

void add_sample_command(CLI::App& app, SampleCommand& cmd);
void run_sample_command(const SampleCommand& cmd);

}  // namespace tidal::cli
