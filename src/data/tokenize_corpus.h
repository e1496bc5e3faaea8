// Text -> token data for training, with a byte-level BPE tokenizer (data/bpe_tokenizer.h). A
// document is a file, or with `lines` a line (without its "\n" or "\r\n"), or with `json_key` a
// line of JSON lines, the string under that key; empty documents are skipped. The output is
// llm.c token shards (data/token_shards.h: one file, or with shard_tokens numbered shards of that
// many tokens, PREFIX_000000.bin, ...; uint16 tokens when the vocabulary fits, else uint32) with
// the end-of-text id between documents, or after each with append_eod (Megatron's --append-eod);
// or a Megatron indexed dataset (data/indexed_dataset.h: a sequence per document, the
// end-of-text id ending each with append_eod).
//
// Invariants: the output depends only on the inputs, the tokenizer and the options, never on the
// thread count: work is cut into chunks at fixed places (line ends, or inside a long document
// where BpeTokenizer::split_point guarantees an unchanged encoding), chunks are encoded in any
// order on any thread and written in input order as they complete, so memory holds a few chunks
// per thread (and a shard's header is written last), whatever the corpus's size.
#pragma once

#include "data/bpe_tokenizer.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tidal::data {

struct TokenizeOptions {
  std::vector<std::string> inputs;  // UTF-8 text files, in document order
  // Shards: the file (with shard_tokens: the prefix of the numbered shards); indexed: the prefix of
  // PREFIX.bin and PREFIX.idx.
  std::string output;
  bool indexed = false;            // a Megatron indexed dataset instead of llm.c shards
  std::int64_t shard_tokens = 0;   // shards: tokens a shard (0: one file)
  std::uint32_t eot_id = 0;        // the end-of-text id (see document_separator)
  bool append_eod = false;         // after every document, not between them
  bool lines = false;              // each line a document, not each file
  std::string json_key;            // JSON lines: each line's string under this key a document
  int threads = 0;                 // 0: std::thread::hardware_concurrency()
  std::size_t chunk_bytes = std::size_t(1) << 20;  // the unit of work, about
  // Called on the calling thread about 5 times a second while the workers run, and once at the end.
  std::function<void(std::uint64_t bytes_done, std::uint64_t bytes_total, std::uint64_t tokens_done)> progress;
};

struct TokenizeReport {
  std::size_t files = 0, documents = 0, threads = 0;  // threads: those that ran (no more than chunks of work)
  std::uint64_t bytes = 0, tokens = 0;
  double seconds = 0;
  bool wide = false;                 // uint32 tokens (shards), int32 (indexed)
  std::vector<std::string> written;  // the files
};

// The end-of-text id: `eot_token` (as tokenizer.json spells it) if given, else "<|endoftext|>";
// an error naming the tokenizer file (and --eot) if it has no such token.
std::uint32_t document_separator(const BpeTokenizer& tokenizer, const std::string& tokenizer_path,
                                 const std::string& eot_token);

TokenizeReport tokenize_corpus(const BpeTokenizer& tokenizer, const TokenizeOptions& options);

}  // namespace tidal::data
