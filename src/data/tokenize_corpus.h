// Text files -> one llm.c token shard (data/token_file.h): uint16 tokens when the vocabulary fits
// (vocab_size <= 65536), else uint32. A document is a file, or with `lines` a line (without its
// "\n" or "\r\n"); empty documents are skipped, and the end-of-text id goes between documents
// (not before the first nor after the last). Invariants: the shard depends only on the inputs and
// the tokenizer, never on the thread count: work is cut into chunks at fixed places (line ends, or
// inside a long document where BpeTokenizer::split_point guarantees an unchanged encoding), chunks
// are encoded in any order on any thread and joined in input order. The shard is built in memory
// (4 bytes a token) before it is written.
#pragma once

#include "data/bpe_tokenizer.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tidal::data {

struct TokenizeOptions {
  std::vector<std::string> inputs;                 // UTF-8 text files, in document order
  std::string output;                              // the shard
  std::uint32_t eot_id = 0;                        // between documents (see document_separator)
  bool lines = false;                              // each line a document, not each file
  int threads = 0;                                 // 0: std::thread::hardware_concurrency()
  std::size_t chunk_bytes = std::size_t(1) << 20;  // the unit of work, about
  // Called on the calling thread about 5 times a second while the workers run, and once at the end.
  std::function<void(std::uint64_t bytes_done, std::uint64_t bytes_total)> progress;
};

struct TokenizeReport {
  std::size_t files = 0, documents = 0, threads = 0;  // threads: those that ran (no more than chunks of work)
  std::uint64_t bytes = 0, tokens = 0;
  double seconds = 0;  // reading and encoding, not writing the shard
  bool wide = false;   // uint32 tokens
};

// The id between documents: `eot_token` (as tokenizer.json spells it) if given, else
// "<|endoftext|>"; an error naming the tokenizer file (and --eot) if it has no such token.
std::uint32_t document_separator(const BpeTokenizer& tokenizer, const std::string& tokenizer_path,
                                 const std::string& eot_token);

TokenizeReport tokenize_corpus(const BpeTokenizer& tokenizer, const TokenizeOptions& options);

}  // namespace tidal::data
