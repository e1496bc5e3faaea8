#include "cli/tokenize_command.h"

#include "data/bpe_tokenizer.h"
#include "data/tokenize_corpus.h"
#include "engine/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

namespace tidal::cli {
namespace {

double mb_per_s(std::uint64_t bytes, double seconds) { return seconds > 0 ? double(bytes) / seconds / 1e6 : 0.0; }

}  // namespace

void add_tokenize_command(CLI::App& app, TokenizeCommand& cmd) {
  cmd.app = app.add_subcommand(
      "tokenize",
      "Turn UTF-8 text files into a token file for training (data.kind = \"tokens\") with a Hugging Face "
      "byte-level BPE tokenizer.json (GPT-2 style)");
  cmd.app->add_option("--tokenizer", cmd.tokenizer, "The tokenizer.json (model.type BPE, ByteLevel pre-tokenizer)")
      ->required()
      ->type_name("FILE");
  cmd.app->add_option("-o,--output", cmd.output, "The token file to write (llm.c's format)")
      ->required()
      ->type_name("FILE");
  cmd.app->add_option("files", cmd.inputs, "UTF-8 text files: each one document (or, with --lines, each line)")
      ->required()
      ->type_name("FILE");
  cmd.app->add_flag("--lines", cmd.lines,
                    "Each line is a document (a corpus of one text per line); empty lines are skipped");
  cmd.app
      ->add_option("--threads", cmd.threads,
                   fmt::format("Worker threads (default: every hardware thread, {} here); the output does not "
                               "depend on it",
                               std::max(1u, std::thread::hardware_concurrency())))
      ->check(CLI::PositiveNumber)
      ->type_name("N");
  cmd.app
      ->add_option("--eot", cmd.eot,
                   "The token between documents, as tokenizer.json spells it (default: <|endoftext|>)")
      ->type_name("TOKEN");
  cmd.app->footer(
      "The ids are those of the `tokenizers` library's Tokenizer.from_file(FILE).encode(text).ids for each document, "
      "with the end-of-text id between documents (not before the first nor after the last); empty documents are "
      "skipped. Tokens are uint16 when the vocabulary fits (vocab_size <= 65536), else uint32: llm.c's shard format, "
      "which `tidal train --set data.kind=tokens --set data.path=OUT.bin` reads (set model.vocab_size to at least "
      "the tokenizer's).\n\n"
      "Examples:\n"
      "  tidal tokenize --tokenizer gpt2/tokenizer.json -o train.bin books/*.txt\n"
      "  tidal tokenize --tokenizer tokenizer.json --lines --threads 8 -o val.bin val.txt\n"
      "  tidal tokenize --tokenizer tokenizer.json --eot '</s>' -o docs.bin a.txt b.txt");
}

void run_tokenize_command(const TokenizeCommand& cmd) {
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::from_file(cmd.tokenizer);
  data::TokenizeOptions options;
  options.inputs = cmd.inputs;
  options.output = cmd.output;
  options.eot_id = data::document_separator(tokenizer, cmd.tokenizer, cmd.eot);
  options.lines = cmd.lines;
  options.threads = cmd.threads;
  // On a terminal a live line on stderr, rewritten in place; elsewhere one line at the end.
  const bool live = ::isatty(::fileno(stderr)) != 0;
  bool shown = false;  // a live line is on screen
  const auto start = std::chrono::steady_clock::now();
  if (live) {
    options.progress = [&](std::uint64_t done, std::uint64_t total) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fmt::print(stderr, "\r\033[Ktokenize: {} / {} ({:.0f}%), {:.1f} MB/s", engine::human_bytes(done),
                 engine::human_bytes(total), total ? 100.0 * double(done) / double(total) : 100.0, mb_per_s(done, s));
      std::fflush(stderr);
      shown = true;
    };
  }
  data::TokenizeReport r;
  try {
    r = data::tokenize_corpus(tokenizer, options);
  } catch (...) {
    if (shown) fmt::print(stderr, "\n");  // the error goes on a line of its own
    throw;
  }
  if (shown) {
    fmt::print(stderr, "\n");
  } else {
    fmt::print(stderr, "tokenize: {} in {:.2f} s, {:.1f} MB/s\n", engine::human_bytes(r.bytes), r.seconds,
               mb_per_s(r.bytes, r.seconds));
  }
  fmt::print(
      "tokenized {} files, {} documents, {} bytes -> {} tokens in {:.2f} s ({:.1f} MB/s, {} threads): {} "
      "tokens, vocab_size {}, wrote {}\n",
      r.files, r.documents, r.bytes, r.tokens, r.seconds, mb_per_s(r.bytes, r.seconds), r.threads,
      r.wide ? "uint32" : "uint16", tokenizer.vocab_size(), cmd.output);
}

}  // namespace tidal::cli
