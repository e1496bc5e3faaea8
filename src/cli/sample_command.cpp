#include "cli/sample_command.h"

#include "data/bpe_tokenizer.h"
#include "engine/inference/sampler.h"
#include "models/factory.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

namespace tidal::cli {

void add_sample_command(CLI::App& app, SampleCommand& cmd) {
  cmd.app = app.add_subcommand(
      "sample", "Generate text with a GPT, Llama, Qwen2, Mixtral or Qwen2-MoE: a tidal checkpoint or a Hugging Face directory of one, "
                "on the CPU with a KV cache");
  cmd.app->add_option("CHECKPOINT_OR_HF_DIR", cmd.model_dir,
                      "A checkpoint directory (its latest step), a step-* directory, or a Hugging Face GPT-2 / Llama "
                      "directory (config.json + model.safetensors)")
      ->required();
  auto* prompt =
      cmd.app->add_option("--prompt", cmd.prompt, "The text to continue (needs --tokenizer)")->type_name("TEXT");
  cmd.app->add_option("--tokenizer", cmd.tokenizer,
                      "The model's tokenizer.json (byte-level BPE): encodes --prompt and decodes the output")
      ->type_name("FILE");
  cmd.app->add_option("--prompt-ids", cmd.prompt_ids, "The prompt as token ids, e.g. \"464 2068 7586\" or \"464,2068\"")
      ->type_name("IDS")
      ->excludes(prompt);
  cmd.app->add_option("--tokens", cmd.tokens, "New tokens to generate")
      ->capture_default_str()
      ->type_name("N");
  cmd.app->add_option("--temperature", cmd.temperature, "Softmax temperature; 0 = greedy (the most likely token)")
      ->capture_default_str()
      ->type_name("T");
  cmd.app->add_option("--top-k", cmd.top_k, "Draw only from the K most likely tokens (0 = from all)")
      ->capture_default_str()
      ->type_name("K");
  cmd.app->add_option("--seed", cmd.seed, "Seed of the draws: the same seed gives the same text")
      ->capture_default_str()
      ->type_name("S");
  cmd.app->add_flag("--print-ids", cmd.print_ids,
                    "After the text, print the generated ids on one line, space-separated (without --tokenizer the "
                    "ids are all that is printed)");
  cmd.app->footer(
      "The model runs on the CPU in fp32: the training forward, one position per new token, each layer's keys and "
      "values kept for the positions after them. Generation stops early when the sequence fills the model's learned "
      "positions. Text streams to stdout as it is generated; a summary with tokens/s goes to stderr. With "
      "--tokenizer and no prompt, the text starts from the end-of-text token.\n\n"
      "Examples:\n"
      "  tidal sample gpt2/ --tokenizer gpt2/tokenizer.json --prompt \"The meaning of life is\" --tokens 50\n"
      "  tidal sample ckpt --tokenizer tokenizer.json --prompt \"Once upon a time\" --temperature 0.8 --top-k 40\n"
      "  tidal sample ckpt/step-00001000 --prompt-ids \"1 2 3\" --tokens 20 --temperature 0 --print-ids");
}

void run_sample_command(const SampleCommand& cmd) {
  TIDAL_CHECK(cmd.tokens >= 1, "--tokens must be >= 1, got {}", cmd.tokens);
  TIDAL_CHECK(std::isfinite(cmd.temperature) && cmd.temperature >= 0,
              "--temperature must be >= 0 (0 = greedy), got {}", cmd.temperature);
  TIDAL_CHECK(cmd.top_k >= 0, "--top-k must be >= 0 (0 = every token), got {}", cmd.top_k);
  TIDAL_CHECK(cmd.prompt.empty() || !cmd.tokenizer.empty(),
              "--prompt needs --tokenizer FILE (the model's tokenizer.json) to turn the text into ids; or give the "
              "ids with --prompt-ids \"1 2 3\"");
  std::optional<data::BpeTokenizer> tokenizer;
  if (!cmd.tokenizer.empty()) tokenizer = data::BpeTokenizer::from_file(cmd.tokenizer);
  std::vector<std::int32_t> prompt;
  if (!cmd.prompt_ids.empty()) {
    prompt = engine::parse_token_ids(cmd.prompt_ids, "--prompt-ids");
  } else if (!cmd.prompt.empty()) {
    for (const std::uint32_t id : tokenizer->encode(cmd.prompt)) prompt.push_back(std::int32_t(id));
  } else {
    TIDAL_CHECK(tokenizer && tokenizer->eot_id(),
                "no prompt: give --prompt TEXT with --tokenizer FILE, or --prompt-ids \"1 2 3\" (a tokenizer with an "
                "end-of-text token alone starts from it)");
    prompt.push_back(std::int32_t(*tokenizer->eot_id()));
  }

  const auto load_start = std::chrono::steady_clock::now();
  engine::InferenceModel m = engine::load_for_inference(cmd.model_dir);
  engine::Sampler sampler(models::make_decoder(*m.model, m.config.model));
  engine::check_prompt(prompt, sampler.vocab_size(), sampler.max_positions(),
                       cmd.prompt_ids.empty() ? "the prompt" : "--prompt-ids");
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();

  if (tokenizer) {
    fmt::print("{}", engine::decode_ids(*tokenizer, prompt));
    std::fflush(stdout);
  }
  engine::SampleOptions options{
      .max_new_tokens = cmd.tokens, .temperature = cmd.temperature, .top_k = cmd.top_k, .seed = cmd.seed};
  bool first = true;
  options.on_token = [&](std::int32_t id) {
    if (tokenizer) fmt::print("{}", engine::decode_ids(*tokenizer, std::span(&id, 1)));
    else fmt::print("{}{}", first ? "" : " ", id);
    first = false;
    std::fflush(stdout);
  };
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::int32_t> ids = sampler.generate(prompt, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("\n");
  if (tokenizer && cmd.print_ids) fmt::print("{}\n", fmt::join(ids, " "));
  std::fflush(stdout);

  if (std::int64_t(ids.size()) < cmd.tokens)
    fmt::print(stderr, "sample: stopped after {} of {} tokens: the sequence fills the model's {} positions\n",
               ids.size(), cmd.tokens, sampler.max_positions());
  fmt::print(stderr, "sample: {} tokens after a prompt of {} in {:.2f} s ({:.1f} tokens/s; loaded {} in {:.2f} s)\n",
             ids.size(), prompt.size(), seconds, seconds > 0 ? double(ids.size()) / seconds : 0.0, m.source, load_s);
}

}  // namespace tidal::cli
