#include "cli/tokenize_command.h"

#include "core/bytes.h"
#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenize_corpus.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
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
      "Turn UTF-8 text or JSON lines into token data for training - llm.c token shards (data.kind = \"tokens\") or "
      "a Megatron indexed dataset (data.kind = \"indexed\") - with a Hugging Face byte-level BPE tokenizer.json "
      "(GPT-2 style)");
  cmd.app->add_option("--tokenizer", cmd.tokenizer, "The tokenizer.json (model.type BPE, ByteLevel pre-tokenizer)")
      ->required()
      ->type_name("FILE");
  cmd.app->add_option("-o,--output", cmd.output,
                      "Shards: the token file to write (with --shard-size, the prefix of OUT_000000.bin, ...); indexed: "
                      "the prefix of OUT.bin and OUT.idx")
      ->required()
      ->type_name("OUT");
  cmd.app->add_option("files", cmd.inputs, "UTF-8 text files: each one document (or, with --lines, each line; with "
                      "--json-key, each line's record)")
      ->required()
      ->type_name("FILE");
  cmd.app->add_option("--format", cmd.format, "shards (llm.c's token files) or indexed (Megatron's .bin / .idx)")
      ->check(CLI::IsMember({"shards", "indexed"}))
      ->capture_default_str();
  cmd.app->add_flag("--lines", cmd.lines,
                    "Each line is a document (a corpus of one text per line); empty lines are skipped");
  cmd.app->add_option("--json-key", cmd.json_key,
                      "JSON lines: each line is a JSON object and its string under this key a document (\"text\" in "
                      "most corpora)")
      ->type_name("KEY");
  cmd.app->add_option("--shard-size", cmd.shard_size, "Shards: tokens a shard, numbered OUT_000000.bin, ... (0: one file)")
      ->check(CLI::NonNegativeNumber)
      ->type_name("TOKENS");
  cmd.app->add_flag("--append-eod", cmd.append_eod,
                    "The end-of-text id after every document (Megatron's --append-eod); without it, shards put it "
                    "between documents and an indexed dataset keeps documents apart by its index alone");
  cmd.app
      ->add_option("-j,--threads", cmd.threads,
                   fmt::format("Worker threads (default: every hardware thread, {} here); the output does not "
                               "depend on it",
                               std::max(1u, std::thread::hardware_concurrency())))
      ->check(CLI::PositiveNumber)
      ->type_name("N");
  cmd.app
      ->add_option("--eot", cmd.eot, "The end-of-text token, as tokenizer.json spells it (default: <|endoftext|>)")
      ->type_name("TOKEN");
  cmd.app->footer(
      "The ids are those of the `tokenizers` library's Tokenizer.from_file(FILE).encode(text).ids for each document; "
      "empty documents are skipped. Shards hold uint16 tokens when the vocabulary fits (vocab_size <= 65536), else "
      "uint32 - llm.c's format, which `tidal train --set data.kind=tokens --set data.path=OUT.bin` reads (a directory "
      "or a glob of shards too); an indexed dataset holds a sequence a document, uint16 below 65500 ids, else int32, "
      "as Megatron's preprocess_data.py writes it (`--set data.kind=indexed --set data.path=OUT`). The work runs on "
      "-j threads, the output written in order as it comes, so memory stays a few chunks a thread whatever the "
      "corpus's size. Set model.vocab_size to at least the tokenizer's.\n\n"
      "Examples:\n"
      "  tidal tokenize --tokenizer gpt2/tokenizer.json -o train.bin books/*.txt\n"
      "  tidal tokenize --tokenizer tokenizer.json --json-key text --shard-size 100000000 -j 8 -o shards/web web.jsonl\n"
      "  tidal tokenize --tokenizer tokenizer.json --json-key text --format indexed --append-eod -o web web.jsonl\n"
      "  tidal tokenize --tokenizer tokenizer.json --lines --eot '</s>' -o val.bin val.txt");
}

void run_tokenize_command(const TokenizeCommand& cmd) {
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::from_file(cmd.tokenizer);
  TIDAL_CHECK(!(cmd.lines && !cmd.json_key.empty()), "--lines and --json-key both say what a document is: give one");
  data::TokenizeOptions options;
  options.inputs = cmd.inputs;
  options.output = cmd.output;
  options.indexed = cmd.format == "indexed";
  options.shard_tokens = cmd.shard_size;
  options.eot_id = data::document_separator(tokenizer, cmd.tokenizer, cmd.eot);
  options.append_eod = cmd.append_eod;
  options.lines = cmd.lines;
  options.json_key = cmd.json_key;
  options.threads = cmd.threads;
  // On a terminal a live line on stderr, rewritten in place; elsewhere one line at the end.
  const bool live = ::isatty(::fileno(stderr)) != 0;
  bool shown = false;  // a live line is on screen
  const auto start = std::chrono::steady_clock::now();
  if (live) {
    options.progress = [&](std::uint64_t done, std::uint64_t total, std::uint64_t tokens) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fmt::print(stderr, "\r\033[Ktokenize: {} / {} ({:.0f}%), {:.1f} MB/s, {} tokens ({:.2f} M/s)",
                 human_bytes(done), human_bytes(total),
                 total ? 100.0 * double(done) / double(total) : 100.0, mb_per_s(done, s), tokens,
                 s > 0 ? double(tokens) / s / 1e6 : 0.0);
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
    fmt::print(stderr, "tokenize: {} in {:.2f} s, {:.1f} MB/s\n", human_bytes(r.bytes), r.seconds,
               mb_per_s(r.bytes, r.seconds));
  }
  fmt::print("tokenized {} files, {} documents, {} bytes -> {} tokens in {:.2f} s ({:.1f} MB/s, {:.2f} M tokens/s, {} "
             "threads): {}, vocab_size {}, wrote {}\n",
             r.files, r.documents, r.bytes, r.tokens, r.seconds, mb_per_s(r.bytes, r.seconds),
             r.seconds > 0 ? double(r.tokens) / r.seconds / 1e6 : 0.0, r.threads,
             options.indexed ? (r.wide ? "int32" : "uint16") : (r.wide ? "uint32" : "uint16"), tokenizer.vocab_size(),
             r.written.size() <= 3 ? fmt::format("{}", fmt::join(r.written, ", "))
                                   : fmt::format("{} files, {} ... {}", r.written.size(), r.written.front(),
                                                 r.written.back()));
}

}  // namespace tidal::cli
