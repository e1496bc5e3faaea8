#include "cli/export_command.h"

#include "core/bytes.h"
#include "core/error.h"
#include "engine/finetune.h"
#include "engine/hf_checkpoint.h"

#if TIDAL_MPI
#include "comm/mpi_runtime.h"
#endif

#include <fmt/format.h>

#include <cstdint>

namespace tidal::cli {

void add_export_command(CLI::App& app, ExportCommand& cmd) {
  CLI::App* e = app.add_subcommand(
      "export", "Write a checkpoint as a Hugging Face model directory (config.json + model.safetensors) that "
                "transformers' from_pretrained opens, or a LoRA run's adapters as a PEFT directory");
  cmd.app = e;
  e->add_option("--format", cmd.format,
                "Output format (hf: a Hugging Face model directory; peft: a LoRA run's adapters as "
                "adapter_config.json + adapter_model.safetensors, for peft's PeftModel.from_pretrained)")
      ->check(CLI::IsMember({"hf", "peft"}))
      ->capture_default_str();
  e->add_flag("--merge", cmd.merge,
              "A LoRA run (finetune.method = \"lora\"): write the whole model, its base from model.init_from with "
              "the adapters folded in (W + alpha/r B A), as a Hugging Face model directory");
  e->add_option("CHECKPOINT", cmd.checkpoint, "A checkpoint directory (its latest step) or a step-* directory")
      ->required();
  e->add_option("OUT_DIR", cmd.out, "Where the Hugging Face directory goes (created)")->required();
  e->add_option("--max-shard-gb", cmd.max_shard_gb,
                "Above this many GB (2^30 bytes) the weights go in numbered shards with an index")
      ->capture_default_str();
  e->footer(
      "The model's architecture comes from the config stored in the checkpoint: gpt -> GPT2LMHeadModel, bert -> "
      "BertForMaskedLM, vit -> ViTForImageClassification, llama -> LlamaForCausalLM, with tidal's weights in "
      "Hugging Face's names and layouts (GPT-2's Conv1D weights transposed, BERT's, ViT's and Llama's q, k, v "
      "apart, Llama's gate and up apart). Weights are fp32.\n\n"
      "The checkpoint may have been saved under any layout; its tensors are read one at a time, so the export "
      "holds at most the largest of them. Under mpirun the ranks write the shards between them.\n\n"
      "Examples:\n"
      "  tidal export --format hf ckpt hf-out        # then: GPT2LMHeadModel.from_pretrained(\"hf-out\")\n"
      "  tidal export ckpt/step-00001000 hf-1000\n"
      "  tidal export --format peft lora-ckpt adapters  # then: PeftModel.from_pretrained(base, \"adapters\")\n"
      "  tidal export --merge lora-ckpt merged         # the base with the adapters folded in\n"
      "  mpirun -np 4 tidal export --max-shard-gb 5 ckpt hf-out");
}

void run_export_command(const ExportCommand& cmd, engine::Launch& launch) {
  TIDAL_CHECK(cmd.max_shard_gb > 0, "--max-shard-gb must be > 0, got {}", cmd.max_shard_gb);
  if (cmd.format == "peft" && !cmd.merge) {
    if (!launch.is_main()) return;
    const auto r = engine::export_peft(cmd.checkpoint, cmd.out);
    fmt::print("exported {} as {}: {} tensors, {} in adapter_model.safetensors + adapter_config.json\n",
               cmd.checkpoint, r.architecture, r.tensors, human_bytes(r.bytes));
    return;
  }
  // Under mpirun the ranks write the shards between them.
  std::shared_ptr<comm::Communicator> world;
#if TIDAL_MPI
  if (launch.mpi() && launch.world_size() > 1) world = launch.mpi()->world(comm::Seconds(3600));
#endif
  const auto r = engine::export_hf(cmd.checkpoint, cmd.out,
                                   std::uint64_t(cmd.max_shard_gb * double(std::uint64_t(1) << 30)), world.get(),
                                   cmd.merge);
  if (!launch.is_main()) return;
  fmt::print("exported {} as {}: {} tensors, {} in {} file{} + config.json\n", cmd.checkpoint, r.architecture,
             r.tensors, human_bytes(r.bytes), r.files, r.files > 1 ? "s (with an index)" : "");
  fmt::print("memory{}: {} for tensors and the buffer at the peak (the largest tensor {}); the process's peak "
             "resident memory {}\n",
             world ? " on rank 0" : "", human_bytes(r.peak_bytes), human_bytes(r.largest_tensor_bytes),
             human_bytes(r.peak_rss_bytes));
}

}  // namespace tidal::cli
