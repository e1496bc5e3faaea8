// Token data on disk. `tokens`: llm.c's shard format (a header of 256 int32: magic 20240520,
// version 1 = uint16 tokens or 2 = uint32 tokens, token count; then the tokens), which GPT
// data pipelines write. `text`: a UTF-8 file read as bytes (a byte-level tokenizer, ids 0..255).
// Samples are windows of seq_len + 1 tokens; the last 1/20 of windows (at least one) is the
// eval split; each training epoch visits the windows in a seeded pseudo-random order.
#pragma once

#include "data/token_dataset.h"

#include <string>
#include <vector>

namespace tidal::data {

inline constexpr std::int32_t kTokenFileMagic = 20240520;

void write_token_file(const std::string& path, const std::vector<std::uint32_t>& tokens, bool wide);

class TokenFileDataset final : public TokenDataset {
 public:
  enum class Format { tokens, text };
  TokenFileDataset(const std::string& path, Format format, std::int64_t seq_len, std::int64_t vocab,
                   Objective objective, std::uint64_t seed);

  std::vector<std::int32_t> sequence(std::int64_t index, Split split) const override;
  std::string describe() const override;

 private:
  std::string path_;
  std::vector<std::int32_t> tokens_;
  std::int64_t train_windows_ = 0, eval_windows_ = 0;
};

}  // namespace tidal::data
