// Megatron-Core's indexed datasets (megatron/core/datasets/indexed_dataset.py; GPT-NeoX and NeMo
// use them too): PREFIX.bin holds the tokens of every sequence back to back, PREFIX.idx the
// index - the header "MMIDIDX\0\0", version 1 (uint64), the tokens' dtype code (uint8: 1 uint8,
// 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), the sequence count and the
// document-index count (uint64), then each sequence's length (int32), each sequence's byte offset
// in .bin (int64), and the document indices (int64: document d holds sequences [doc[d],
// doc[d + 1]), the first 0 and the last the sequence count); a multimodal index's per-sequence
// modes may follow (ignored). Both files are mapped, never read whole: opening checks the index
// against both files' sizes; a read copies a sequence's tokens out and gives their pages back.
//
// The writer (`tidal tokenize --format indexed`) makes what Megatron's IndexedDatasetBuilder
// makes: a document per call, one sequence each.
#pragma once

#include "io/atomic_file.h"
#include "data/token_stream.h"
#include "io/mapped_file.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tidal::data {

class IndexedDataset final : public TokenStream {
 public:
  // PREFIX.idx and PREFIX.bin; tidal::Error naming the file and what is wrong. `key`: the config key
  // that named the prefix.
  IndexedDataset(const std::string& prefix, const std::string& key = "data.path");

  std::int64_t sequences() const { return sequences_; }
  std::int64_t documents() const { return documents_ - 1; }  // document indices hold one more
  std::int64_t tokens() const override { return tokens_; }
  int token_bytes() const { return width_; }
  // Sequence i's length and its first token's place in the stream of all tokens.
  std::int64_t sequence_length(std::int64_t i) const;
  std::int64_t sequence_start(std::int64_t i) const;
  // Document d's first sequence (d in [0, documents()]: the last gives sequences()).
  std::int64_t document_index(std::int64_t d) const;
  // Tokens [begin, begin + n) of the stream of every sequence back to back, as int32.
  void read(std::int64_t begin, std::int64_t n, std::int32_t* out) const override;
  std::string describe() const override;
  // Where the documents of the document index start (a binary search: O(log documents) reads).
  std::optional<std::vector<std::int64_t>> document_starts(std::int64_t begin, std::int64_t n) const override;

 private:
  std::string prefix_;
  io::MappedFile index_, data_;
  int width_ = 0;  // bytes a token
  int dtype_ = 0;  // Megatron's code
  std::int64_t sequences_ = 0, documents_ = 0, tokens_ = 0;
  std::uint64_t lengths_at_ = 0, pointers_at_ = 0, documents_at_ = 0;  // byte offsets in .idx
};

// Writes PREFIX.bin and PREFIX.idx as Megatron's IndexedDatasetBuilder does: a document is one
// sequence, its tokens appended in any number of pieces until end_document(). Tokens are uint16
// (Megatron's choice below 65500 ids) or int32. finish() writes the index; the files appear
// complete (written under temporary names, then renamed) or not at all.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, bool wide);
  void append(const std::uint32_t* tokens, std::size_t n);
  void end_document();
  void finish();
  std::int64_t tokens() const { return tokens_; }

 private:
  void flush();

  std::string prefix_;
  bool wide_;
  std::unique_ptr<io::AtomicFile> bin_;
  std::vector<char> pending_;  // tokens not yet written to .bin
  std::vector<std::int32_t> lengths_;
  std::int64_t tokens_ = 0, open_ = 0;  // open_: tokens of the document not yet ended
};

}  // namespace tidal::data
