#include "data/token_shards.h"

#include "core/error.h"

#include <fcntl.h>
#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace tidal::data {
namespace fs = std::filesystem;
namespace {

constexpr std::uint64_t kHeaderBytes = 256 * sizeof(std::int32_t);

}  // namespace

std::vector<std::string> shard_paths(const std::string& spec, const std::string& key) {
  std::vector<std::string> out;
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    for (const auto& e : fs::directory_iterator(spec, ec))
      if (e.is_regular_file() && e.path().extension() == ".bin") out.push_back(e.path().string());
    TIDAL_CHECK(!out.empty(), "{} = '{}' is a directory without token shards (*.bin files)", key, spec);
  } else if (spec.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(spec.c_str(), 0, nullptr, &g);
    for (std::size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    TIDAL_CHECK(!out.empty(), "{} = '{}': the pattern matches no file", key, spec);
  } else {
    TIDAL_CHECK(fs::is_regular_file(spec, ec), "{} = '{}' does not exist (give a token file, a directory of them, or "
                "a glob such as 'shards/train_*.bin')", key, spec);
    out.push_back(spec);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TokenShards::TokenShards(const std::string& spec, const std::string& key) : spec_(spec) {
  for (const std::string& path : shard_paths(spec, key)) {
    io::MappedFile file(path);
    std::int32_t header[256] = {};
    if (file.size() >= kHeaderBytes) std::memcpy(header, file.data(), kHeaderBytes);
    TIDAL_CHECK(file.size() >= kHeaderBytes && header[0] == kTokenFileMagic && (header[1] == 1 || header[1] == 2),
                "{}: '{}' is not a token file (expected llm.c's header: magic {}, version 1 or 2)", key, path,
                kTokenFileMagic);
    const std::int64_t n = header[2];
    const int width = header[1] == 1 ? 2 : 4;
    TIDAL_CHECK(n >= 0 && file.size() == kHeaderBytes + std::uint64_t(n) * std::uint64_t(width),
                "{}: '{}' is {} bytes, and its header promises {} tokens of {} bytes after {} bytes of header: the file "
                "is truncated or not a token file",
                key, path, file.size(), n, width, kHeaderBytes);
    file.release(0, kHeaderBytes);
    shards_.push_back({std::move(file), width, tokens_, n});
    tokens_ += n;
  }
}

bool TokenShards::wide() const {
  return std::any_of(shards_.begin(), shards_.end(), [](const Shard& s) { return s.width == 4; });
}

void TokenShards::read(std::int64_t begin, std::int64_t n, std::int32_t* out) const {
  TIDAL_ASSERT(begin >= 0 && n >= 0 && begin + n <= tokens_, "tokens [{}, +{}) of {}", begin, n, tokens_);
  // The shard holding `begin`: the last whose first token is at or before it.
  auto s = std::upper_bound(shards_.begin(), shards_.end(), begin,
                            [](std::int64_t at, const Shard& shard) { return at < shard.first; }) - 1;
  while (n > 0) {
    const std::int64_t from = begin - s->first, take = std::min(n, s->tokens - from);
    const std::byte* at = s->file.data() + kHeaderBytes + std::uint64_t(from) * std::uint64_t(s->width);
    if (s->width == 2) {
      for (std::int64_t i = 0; i < take; ++i) {
        std::uint16_t t;
        std::memcpy(&t, at + 2 * i, 2);
        out[i] = std::int32_t(t);
      }
    } else {
      std::memcpy(out, at, std::size_t(take) * 4);
    }
    s->file.release(kHeaderBytes + std::uint64_t(from) * std::uint64_t(s->width), std::uint64_t(take * s->width));
    out += take;
    begin += take;
    n -= take;
    ++s;
  }
}

std::string TokenShards::describe() const {
  const std::string where =
      shards_.size() == 1 ? spec_ : fmt::format("{} shards of {}", shards_.size(), spec_);
  return fmt::format("{}: {} tokens ({})", where, tokens_, wide() ? "uint32" : "uint16");
}

TokenShardWriter::TokenShardWriter(const std::string& path, bool wide)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())), wide_(wide) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TIDAL_CHECK(fd_ >= 0, "cannot create '{}': {} (check that the directory exists and is writable)", tmp_,
              std::strerror(errno));
  pending_.resize(kHeaderBytes, 0);  // the header, its count written by finish()
}

TokenShardWriter::~TokenShardWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void TokenShardWriter::flush() {
  for (std::size_t done = 0; done < pending_.size();) {
    const ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    TIDAL_CHECK(n > 0, "writing '{}' failed: {}", tmp_, std::strerror(errno));
    done += std::size_t(n);
  }
  pending_.clear();
}

void TokenShardWriter::append(const std::uint32_t* tokens, std::size_t n) {
  TIDAL_CHECK(count_ + std::int64_t(n) <= std::int64_t(INT32_MAX),
              "'{}': a token file holds at most 2^31 - 1 tokens: write several shards (tidal tokenize --shard-size)",
              path_);
  for (std::size_t i = 0; i < n; ++i) {
    if (wide_) {
      pending_.insert(pending_.end(), reinterpret_cast<const char*>(tokens + i), reinterpret_cast<const char*>(tokens + i) + 4);
    } else {
      const std::uint16_t t = std::uint16_t(tokens[i]);
      pending_.insert(pending_.end(), reinterpret_cast<const char*>(&t), reinterpret_cast<const char*>(&t) + 2);
    }
  }
  count_ += std::int64_t(n);
  if (pending_.size() >= (std::size_t(1) << 22)) flush();
}

void TokenShardWriter::finish() {
  flush();
  std::int32_t header[256] = {};
  header[0] = kTokenFileMagic;
  header[1] = wide_ ? 2 : 1;
  header[2] = std::int32_t(count_);
  TIDAL_CHECK(::pwrite(fd_, header, sizeof header, 0) == ssize_t(sizeof header) && ::fsync(fd_) == 0,
              "writing '{}' failed: {}", tmp_, std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  TIDAL_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0, "renaming '{}' to '{}' failed: {}", tmp_, path_,
              std::strerror(errno));
}

void write_token_file(const std::string& path, const std::vector<std::uint32_t>& tokens, bool wide) {
  TokenShardWriter out(path, wide);
  out.append(tokens.data(), tokens.size());
  out.finish();
}

}  // namespace tidal::data
