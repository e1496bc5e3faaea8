#include "io/checksum.h"

#include "core/error.h"

#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>

namespace tidal::io {

struct Checksum::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

Checksum::Checksum() : state_(std::make_unique<State>()) {
  TIDAL_ASSERT(state_->xxh != nullptr, "no memory for a checksum's state");
  XXH3_64bits_reset(state_->xxh);
}
Checksum::~Checksum() = default;

void Checksum::update(const void* data, std::size_t bytes) { XXH3_64bits_update(state_->xxh, data, bytes); }
std::uint64_t Checksum::digest() const { return XXH3_64bits_digest(state_->xxh); }

void Checksum::reset() { XXH3_64bits_reset(state_->xxh); }

void SegmentedChecksum::update(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const std::byte*>(data);
  while (bytes > 0) {
    const std::size_t n = std::size_t(std::min<std::uint64_t>(bytes, segment_bytes_ - in_segment_));
    current_.update(p, n);
    p += n;
    bytes -= n;
    in_segment_ += n;
    if (in_segment_ == segment_bytes_) {
      done_.push_back(current_.digest());
      current_.reset();
      in_segment_ = 0;
    }
  }
}

std::vector<std::uint64_t> SegmentedChecksum::digests() {
  if (in_segment_ > 0) {
    done_.push_back(current_.digest());
    current_.reset();
    in_segment_ = 0;
  }
  return done_;
}

std::uint64_t checksum(const void* data, std::size_t bytes) { return XXH3_64bits(data, bytes); }

std::string checksum_hex(std::uint64_t digest) { return fmt::format("{:016x}", digest); }

std::uint64_t parse_checksum(const std::string& hex, const std::string& what) {
  TIDAL_CHECK(hex.size() == 16 && hex.find_first_not_of("0123456789abcdef") == std::string::npos,
              "{}: checksum '{}' is not 16 hex digits", what, hex);
  return std::strtoull(hex.c_str(), nullptr, 16);
}

}  // namespace tidal::io
