// `tidal tokenize`: text or JSON lines -> llm.c token shards or a Megatron indexed dataset with a
// Hugging Face byte-level BPE tokenizer.json (data/bpe_tokenizer.h, data/tokenize_corpus.h). This file owns the options, the
// help text and what the command prints; the work is in data/.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tidal::cli {

struct TokenizeCommand {
  CLI::App* app = nullptr;  // the subcommand, once added
  std::string tokenizer, output, eot, format = "shards", json_key;
  std::vector<std::string> inputs;
  bool lines = false, append_eod = false;
  int threads = 0;  // 0: every hardware thread
  std::int64_t shard_size = 0;  // tokens a shard; 0: one file
};

void add_tokenize_command(CLI::App& app, TokenizeCommand& cmd);
void run_tokenize_command(const TokenizeCommand& cmd);

}  // namespace tidal::cli
