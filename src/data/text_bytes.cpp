#include "data/text_bytes.h"

#include "core/error.h"

namespace tidal::data {

void TextBytes::read(std::int64_t begin, std::int64_t n, std::int32_t* out) const {
  TIDAL_ASSERT(begin >= 0 && n >= 0 && begin + n <= tokens(), "bytes [{}, +{}) of {}", begin, n, tokens());
  const auto* bytes = reinterpret_cast<const unsigned char*>(file_.data()) + begin;
  for (std::int64_t i = 0; i < n; ++i) out[i] = std::int32_t(bytes[i]);
  file_.release(std::uint64_t(begin), std::uint64_t(n));
}

std::string TextBytes::describe() const { return fmt::format("{}: {} bytes", file_.path(), file_.size()); }

}  // namespace tidal::data
