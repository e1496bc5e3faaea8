#include "cli/data_command.h"

#include "config/options.h"
#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "ops/cross_entropy.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <optional>

namespace tidal::cli {
namespace {

// One token as text: its bytes through the tokenizer, else its id.
std::string token_text(const std::optional<data::BpeTokenizer>& tokenizer, std::int32_t id) {
  if (!tokenizer) return fmt::format("{} ", id);
  return std::string(tokenizer->bytes_of(std::uint32_t(id)));
}

// Sample `row` of the batch: each document on lines of its own, trained targets between marks.
std::string sample_text(const nn::Batch& b, std::int64_t row, const std::optional<data::BpeTokenizer>& tokenizer,
                        bool colour) {
  const std::int64_t T = b.tokens.shape()[1];
  const std::int32_t* tok = b.tokens.data<std::int32_t>() + row * T;
  const std::int32_t* tgt = b.targets.data<std::int32_t>() + row * T;
  const std::int32_t* pos = b.positions.defined() ? b.positions.data<std::int32_t>() + row * T : nullptr;
  const char* open = colour ? "\033[1;32m" : "[[";
  const char* close = colour ? "\033[0m" : "]]";
  std::string out;
  int document = 0;
  bool trained = false;  // inside a mark
  auto mark = [&](bool now) {
    if (now != trained) out += now ? open : close;
    trained = now;
  };
  // Padding: a last document of one token repeated that trains nothing (chat data's).
  std::int64_t padding = T;
  if (pos) {
    std::int64_t last = T - 1;
    while (last > 0 && pos[last] != 0) --last;
    const bool repeated = std::all_of(tok + last, tok + T, [&](std::int32_t v) { return v == tok[last]; });
    const bool ignored = std::all_of(tgt + last, tgt + T, [](std::int32_t v) { return v == ops::kIgnoreIndex; });
    if (last > 0 && repeated && ignored && tgt[last - 1] == ops::kIgnoreIndex) padding = last;
  }
  // Token t + 1 is trained when token t's target is kept; token 0 never is.
  for (std::int64_t t = 0; t <= T; ++t) {
    if (t == padding) {
      mark(false);
      out += fmt::format("\n--- padding: {} x {} ---", T + 1 - padding, token_text(tokenizer, tok[padding]));
      break;
    }
    if (t < T && pos && pos[t] == 0) {
      mark(false);
      out += fmt::format("{}--- document {} ---\n", t ? "\n" : "", document++);
    }
    const bool target = t > 0 && tgt[t - 1] != ops::kIgnoreIndex;
    mark(target);
    if (t < T) out += token_text(tokenizer, tok[t]);
    else if (target) out += token_text(tokenizer, tgt[T - 1]);  // the last target, beyond the inputs
  }
  mark(false);
  return out;
}

}  // namespace

void add_data_command(CLI::App& app, DataCommand& cmd) {
  CLI::App* c = app.add_subcommand(
      "data", "Show what a run trains on: the config's data as samples the model reads, trained targets marked");
  cmd.app = c;
  add_config_options(c, cmd.config, "A TOML config (the run's)", "data.kind=chat");
  c->add_option("-n,--samples", cmd.samples, "Samples to show")->capture_default_str()->check(CLI::PositiveNumber);
  c->add_option("--first", cmd.first, "The first sample's index in the split")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--split", cmd.split, "train (in the order training reads it) | eval")->capture_default_str()
      ->check(CLI::IsMember({"train", "eval"}));
  c->add_flag("--json", cmd.json,
              "One JSON line a sample: its index, id (sample_ids), tokens, targets (-100: not trained) and, for "
              "packed documents, positions");
  c->footer(
      "As text, each sample's documents come apart (--- document k ---) and the tokens that are trained targets "
      "stand between [[ and ]] (in green on a terminal): for chat data (data.kind = \"chat\"), the assistant's "
      "answers. Text needs data.tokenizer; without it the ids show.\n\n"
      "Examples:\n"
      "  tidal data -c sft.toml                     # the first two training samples\n"
      "  tidal data --set data.kind=chat --set data.path=chats.jsonl --set data.tokenizer=model/tokenizer.json\n"
      "  tidal data -c sft.toml --split eval -n 8 --json > samples.jsonl");
}

void run_data_command(const DataCommand& cmd) {
  const config::Config cfg = cmd.config.load();
  const data::DataOptions options = config::data_options(cfg);
  TIDAL_CHECK(options.kind != data::DataKind::images, "tidal data shows token data; data.kind = \"images\" has none");
  const std::unique_ptr<data::Dataset> dataset = data::make_dataset(options);
  const data::Split split = cmd.split == "train" ? data::Split::train : data::Split::eval;
  const nn::Batch b = dataset->batch(cmd.first, cmd.samples, split);
  const std::vector<std::int64_t> ids = split == data::Split::train ? dataset->sample_ids(cmd.first, cmd.samples)
                                                                    : std::vector<std::int64_t>();
  const std::int64_t T = b.tokens.shape()[1];
  if (cmd.json) {
    for (std::int64_t i = 0; i < cmd.samples; ++i) {
      auto row = [&](const Tensor& t) {
        const std::int32_t* p = t.data<std::int32_t>() + i * T;
        return std::vector<std::int32_t>(p, p + T);
      };
      nlohmann::json line{{"sample", cmd.first + i}, {"tokens", row(b.tokens)}, {"targets", row(b.targets)}};
      if (!ids.empty()) line["id"] = ids[std::size_t(i)];
      if (b.positions.defined()) line["positions"] = row(b.positions);
      fmt::print("{}\n", line.dump());
    }
    return;
  }
  std::optional<data::BpeTokenizer> tokenizer;
  if (!cfg.data.tokenizer.empty()) tokenizer = data::BpeTokenizer::from_file(cfg.data.tokenizer);
  const bool colour = ::isatty(::fileno(stdout)) != 0;
  fmt::print("{}\n", dataset->describe());
  for (std::int64_t i = 0; i < cmd.samples; ++i) {
    const std::int32_t* tgt = b.targets.data<std::int32_t>() + i * T;
    const auto trained = std::count_if(tgt, tgt + T, [](std::int32_t v) { return v != ops::kIgnoreIndex; });
    fmt::print("\n=== {} sample {}{}: {} tokens, {} trained targets ===\n{}\n", cmd.split, cmd.first + i,
               ids.empty() ? "" : fmt::format(" (id {})", ids[std::size_t(i)]), T, trained,
               sample_text(b, i, tokenizer, colour));
  }
}

}  // namespace tidal::cli
