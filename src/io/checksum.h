// Checksums of stored bytes: XXH3's 64-bit hash (xxHash: Debian's libxxhash),
// fast enough (tens of GB/s) to cover every byte a checkpoint writes and every byte a load reads.
// Written as 16 hex digits, as `xxh64sum`'s sibling `xxhsum -H3` prints it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::uint64_t checksum(const void* data, std::size_t bytes);
std::string checksum_hex(std::uint64_t digest);
// The digest of 16 hex digits; tidal::Error naming `what` when it is not one.
std::uint64_t parse_checksum(const std::string& hex, const std::string& what);

}  // namespace tidal::io
