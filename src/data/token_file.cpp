#include "data/token_file.h"

#include "data/sample_order.h"

#include "core/error.h"
#include "io/atomic_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace tidal::data {
namespace {

std::vector<std::int32_t> read_tokens(const std::string& path, std::int64_t vocab) {
  std::ifstream in(path, std::ios::binary);
  TIDAL_CHECK(in.good(), "cannot open data.path '{}'", path);
  std::int32_t header[256] = {};
  in.read(reinterpret_cast<char*>(header), sizeof header);
  TIDAL_CHECK(in.good() && header[0] == kTokenFileMagic && (header[1] == 1 || header[1] == 2),
              "data.path '{}' is not a token file (expected llm.c's header: magic {}, version 1 or 2)", path,
              kTokenFileMagic);
  // The header's count against the file's size, before anything is allocated for it.
  const std::int64_t n = header[2], width = header[1] == 1 ? 2 : 4;
  const std::uint64_t bytes = std::filesystem::file_size(path);
  TIDAL_CHECK(n >= 0 && bytes == sizeof header + std::uint64_t(n) * std::uint64_t(width),
              "data.path '{}' is {} bytes, and its header promises {} tokens of {} bytes after {} bytes of header: "
              "the file is truncated or not a token file",
              path, bytes, n, width, sizeof header);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
  if (header[1] == 1) {
    std::vector<std::uint16_t> raw(static_cast<std::size_t>(n));
    in.read(reinterpret_cast<char*>(raw.data()), std::streamsize(raw.size() * 2));
    std::copy(raw.begin(), raw.end(), tokens.begin());
  } else {
    in.read(reinterpret_cast<char*>(tokens.data()), std::streamsize(tokens.size() * 4));
  }
  TIDAL_CHECK(in.good(), "data.path '{}' is truncated: the header promises {} tokens", path, n);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    TIDAL_CHECK(tokens[i] >= 0 && tokens[i] < vocab,
                "data.path '{}': token {} at position {} is not below model.vocab_size ({}): the tokenizer that wrote "
                "it has a larger vocabulary than the model (tokenize with the model's tokenizer, or raise "
                "model.vocab_size)",
                path, tokens[i], i, vocab);
  return tokens;
}

}  // namespace

void write_token_file(const std::string& path, const std::vector<std::uint32_t>& tokens, bool wide) {
  std::int32_t header[256] = {};
  header[0] = kTokenFileMagic;
  header[1] = wide ? 2 : 1;
  header[2] = std::int32_t(tokens.size());
  io::AtomicFile out(path);
  out.write(header, sizeof header);
  if (wide) {
    out.write(tokens.data(), tokens.size() * 4);
  } else {
    std::vector<std::uint16_t> narrow(tokens.begin(), tokens.end());
    out.write(narrow.data(), narrow.size() * 2);
  }
  out.commit();
}

TokenFileDataset::TokenFileDataset(const std::string& path, Format format, std::int64_t seq_len, std::int64_t vocab,
                                   Objective objective, std::uint64_t seed)
    : TokenDataset(seq_len, vocab, objective, seed), path_(path) {
  if (format == Format::tokens) {
    tokens_ = read_tokens(path, vocab);
  } else {
    TIDAL_CHECK(vocab >= 256 + (objective == Objective::masked ? 1 : 0),
                "data.kind = \"text\" uses byte tokens 0..255: model.vocab_size must be at least {}",
                256 + (objective == Objective::masked ? 1 : 0));
    std::ifstream in(path, std::ios::binary);
    TIDAL_CHECK(in.good(), "cannot open data.path '{}'", path);
    for (auto it = std::istreambuf_iterator<char>(in); it != std::istreambuf_iterator<char>(); ++it)
      tokens_.push_back(std::int32_t(static_cast<unsigned char>(*it)));
  }
  const std::int64_t windows = std::int64_t(tokens_.size()) / (seq_len + 1);
  TIDAL_CHECK(windows >= 2, "data.path '{}' holds {} tokens: fewer than two sequences of model.seq_len + 1 = {}", path,
              tokens_.size(), seq_len + 1);
  eval_windows_ = std::max<std::int64_t>(1, windows / 20);
  train_windows_ = windows - eval_windows_;
}

std::vector<std::int32_t> TokenFileDataset::sequence(std::int64_t index, Split split) const {
  std::int64_t window;
  if (split == Split::train) {
    window = training_sample(index, train_windows_, seed_);
  } else {
    window = train_windows_ + index % eval_windows_;
  }
  const auto begin = tokens_.begin() + std::ptrdiff_t(window * (seq_len_ + 1));
  return {begin, begin + std::ptrdiff_t(seq_len_ + 1)};
}

std::string TokenFileDataset::describe() const {
  return fmt::format("{}: {} tokens, {} training and {} eval sequences of {}", path_, tokens_.size(), train_windows_,
                     eval_windows_, seq_len_ + 1);
}

}  // namespace tidal::data
