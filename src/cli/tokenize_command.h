// `tidal tokenize`: text files -> an llm.c token shard with a Hugging Face byte-level BPE
// tokenizer.json (data/bpe_tokenizer.h, data/tokenize_corpus.h). This file owns the options, the
// help text and what the command prints; the work is in data/.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace tidal::cli {

struct TokenizeCommand {
  CLI::App* app = nullptr;  // the subcommand, once added
  std::string tokenizer, output, eot;
  std::vector<std::string> inputs;
  bool lines = false;
  int threads = 0;  // 0: every hardware thread
};

void add_tokenize_command(CLI::App& app, TokenizeCommand& cmd);
void run_tokenize_command(const TokenizeCommand& cmd);

}  // namespace tidal::cli
