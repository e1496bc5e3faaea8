#include "cli/checkpoint_command.h"

#include "core/bytes.h"
#include "engine/checkpoint/inspect.h"

#include <fmt/format.h>

namespace tidal::cli {

void add_checkpoint_command(CLI::App& app, CheckpointCommand& cmd) {
  CLI::App* c = app.add_subcommand("checkpoint", "Look into a checkpoint, or gather its tensors whole");
  cmd.app = c;
  c->require_subcommand(1);
  cmd.inspect = c->add_subcommand(
      "inspect", "Print a checkpoint's step, layout, files per rank and where each tensor's blocks are, and verify "
                 "every block's checksum");
  cmd.inspect->add_option("CHECKPOINT", cmd.checkpoint, "A checkpoint directory (its latest step) or a step-* directory")
      ->required();
  cmd.inspect->add_flag("--json", cmd.json, "Print the report as JSON");
  cmd.inspect->add_flag("--no-verify", cmd.no_verify, "Skip reading every block for its checksum");
  cmd.consolidate = c->add_subcommand(
      "consolidate", "Write a checkpoint's tensors whole, as model.safetensors (weights) and optimizer.safetensors "
                     "(AdamW moments) in OUT_DIR: files any safetensors reader opens, and a step directory tidal "
                     "resumes from");
  cmd.consolidate->add_option("CHECKPOINT", cmd.checkpoint, "A checkpoint directory (its latest step) or a step-* "
                              "directory")->required();
  cmd.consolidate->add_option("OUT_DIR", cmd.out, "Where the two files go (created)")->required();
  c->footer(
      "A checkpoint is a step directory of one safetensors file per rank (each holding the blocks that rank "
      "owned) and metadata.json, which maps every tensor to its blocks; it loads under any layout.\n\n"
      "Examples:\n"
      "  tidal checkpoint inspect ckpt              # the latest step: a table per rank and per tensor\n"
      "  tidal checkpoint inspect --json ckpt/step-00001000\n"
      "  tidal checkpoint consolidate ckpt whole    # whole/model.safetensors, whole/optimizer.safetensors");
}

void run_checkpoint_command(const CheckpointCommand& cmd) {
  if (cmd.inspect->parsed()) {
    const nlohmann::json report = engine::inspect_checkpoint(cmd.checkpoint, !cmd.no_verify);
    if (cmd.json) fmt::print("{}\n", report.dump(1));
    else fmt::print("{}", engine::inspect_text(report));
    return;
  }
  const std::uint64_t bytes = engine::consolidate_checkpoint(cmd.checkpoint, cmd.out);
  fmt::print("consolidated {} into {}: model.safetensors and optimizer.safetensors, {}\n", cmd.checkpoint, cmd.out,
             human_bytes(bytes));
}

}  // namespace tidal::cli
