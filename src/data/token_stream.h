// A stream of token ids read in place: llm.c shards (data/token_shards.h), a Megatron indexed
// dataset (data/indexed_dataset.h), or a text file's bytes (data/text_bytes.h). Nothing of it is
// held in memory but what a read copies out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tidal::data {

class TokenStream {
 public:
  virtual ~TokenStream() = default;
  virtual std::int64_t tokens() const = 0;
  // Tokens [begin, begin + n) as int32.
  virtual void read(std::int64_t begin, std::int64_t n, std::int32_t* out) const = 0;
  virtual std::string describe() const = 0;
  // Where documents start among tokens [begin, begin + n): offsets in (0, n), ascending. A stream
  // that records its documents (a Megatron indexed dataset) says; the others return nullopt, and
  // the dataset splits them at an end-of-text id (data.eod_id).
  virtual std::optional<std::vector<std::int64_t>> document_starts(std::int64_t begin, std::int64_t n) const {
    (void)begin;
    (void)n;
    return std::nullopt;
  }
};

}  // namespace tidal::data
