// Checksums of stored bytes: XXH3's 64-bit hash (xxHash: Debian's libxxhash),
// fast enough (tens of GB/s) to cover every byte a checkpoint writes and every byte a load reads.
// Written as 16 hex digits, as `xxh64sum`'s sibling `xxhsum -H3` prints it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tidal::io {

// The hash of bytes given in any number of pieces.
class Checksum {
 public:
  Checksum();
  ~Checksum();
  Checksum(const Checksum&) = delete;
  Checksum& operator=(const Checksum&) = delete;

  void update(const void* data, std::size_t bytes);
  std::uint64_t digest() const;
  void reset();  // a fresh hash

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The hashes of consecutive segments of `segment_bytes` of bytes given in any number of pieces
// (the last segment shorter): a reader of part of the bytes checks the segments it touches.
class SegmentedChecksum {
 public:
  explicit SegmentedChecksum(std::uint64_t segment_bytes) : segment_bytes_(segment_bytes) {}
  void update(const void* data, std::size_t bytes);
  // Every segment's hash (none for no bytes).
  std::vector<std::uint64_t> digests();

 private:
  std::uint64_t segment_bytes_, in_segment_ = 0;
  Checksum current_;
  std::vector<std::uint64_t> done_;
};

std::uint64_t checksum(const void* data, std::size_t bytes);
std::string checksum_hex(std::uint64_t digest);
// The digest of 16 hex digits; tidal::Error naming `what` when it is not one.
std::uint64_t parse_checksum(const std::string& hex, const std::string& what);

}  // namespace tidal::io
