// A UTF-8 text file as a stream of byte tokens (ids 0..255: data.kind = "text", a byte-level
// model's data), mapped in place.
#pragma once

#include "data/token_stream.h"
#include "io/mapped_file.h"

namespace tidal::data {

class TextBytes final : public TokenStream {
 public:
  explicit TextBytes(const std::string& path) : file_(path) {}
  std::int64_t tokens() const override { return std::int64_t(file_.size()); }
  void read(std::int64_t begin, std::int64_t n, std::int32_t* out) const override;
  std::string describe() const override;

 private:
  io::MappedFile file_;
};

}  // namespace tidal::data
