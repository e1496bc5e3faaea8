// llm.c token shards as one stream of tokens, mapped in place: data.path names a file, a
// directory (its *.bin files) or a glob, taken in name order. Each shard's header (256 int32:
// magic 20240520, version 1 = uint16 tokens or 2 = uint32, the token count) is checked against
// its size when the shards are opened - nothing else is read then, so opening a corpus of any
// size takes as long as its headers - and a read copies tokens out of the mapped files, across
// shard boundaries, and gives their pages back, so a rank holds the tokens it trains on at most.
#pragma once

#include "data/token_stream.h"
#include "io/mapped_file.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tidal::data {

inline constexpr std::int32_t kTokenFileMagic = 20240520;

// The files `spec` names: itself if a file, the *.bin files of a directory, or a glob's matches,
// each in name order. tidal::Error naming `key` (the config key) when there are none.
std::vector<std::string> shard_paths(const std::string& spec, const std::string& key);

class TokenShards final : public TokenStream {
 public:
  TokenShards(const std::string& spec, const std::string& key);

  std::int64_t tokens() const override { return tokens_; }
  std::size_t shards() const { return shards_.size(); }
  bool wide() const;  // some shard holds uint32 tokens
  // Tokens [begin, begin + n) of the stream, as int32.
  void read(std::int64_t begin, std::int64_t n, std::int32_t* out) const override;
  // "3 shards under data/ (12.5M tokens, uint16)".
  std::string describe() const override;

 private:
  struct Shard {
    io::MappedFile file;
    int width;            // bytes a token
    std::int64_t first;  // its first token's place in the stream
    std::int64_t tokens;
  };
  std::string spec_;
  std::vector<Shard> shards_;
  std::int64_t tokens_ = 0;
};

// One shard written as its tokens come (uint16 unless `wide`), the header's count filled in by
// finish(): written under a temporary name, fsynced and renamed, so it appears complete or not at
// all (a writer dropped unfinished removes its temporary).
class TokenShardWriter {
 public:
  TokenShardWriter(const std::string& path, bool wide);
  ~TokenShardWriter();
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;

  void append(const std::uint32_t* tokens, std::size_t n);
  void finish();
  std::int64_t tokens() const { return count_; }
  const std::string& path() const { return path_; }

 private:
  void flush();

  std::string path_, tmp_;
  int fd_ = -1;
  bool wide_;
  std::int64_t count_ = 0;
  std::vector<char> pending_;
};

// Writes one shard of `tokens` (uint16 unless `wide`) at `path`, atomically.
void write_token_file(const std::string& path, const std::vector<std::uint32_t>& tokens, bool wide);

}  // namespace tidal::data
