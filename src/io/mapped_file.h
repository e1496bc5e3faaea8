// A file mapped read-only: its pages are read from disk where touched and nowhere else, and
// release() gives pages back to the kernel (they are read again if touched), so a reader of a
// few ranges of a large file holds those ranges at most. Token data, datasets' indices and
// checkpoints are read this way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tidal::io {

class MappedFile {
 public:
  // tidal::Error naming the file when it cannot be opened or mapped. An empty file maps nothing.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;

  const std::string& path() const { return path_; }
  const std::byte* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  // The pages holding bytes [offset, offset + bytes) back to the kernel.
  void release(std::uint64_t offset, std::uint64_t bytes) const;

 private:
  std::string path_;
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace tidal::io
