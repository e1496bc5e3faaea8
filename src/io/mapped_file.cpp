#include "io/mapped_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace tidal::io {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TIDAL_CHECK(fd >= 0, "cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(fmt::format("cannot read the size of '{}': {}", path, std::strerror(err)));
  }
  size_ = std::uint64_t(st.st_size);
  if (size_ > 0) {
    void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    TIDAL_CHECK(address != MAP_FAILED, "cannot map '{}' ({} bytes) into memory: {}", path, size_, std::strerror(err));
    data_ = static_cast<std::byte*>(address);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

void MappedFile::release(std::uint64_t offset, std::uint64_t bytes) const {
  if (!data_ || offset >= size_) return;
  // Every page holding a byte of the range (a neighbour sharing an edge page is read again if
  // touched: the pages are the file's, never modified).
  const std::uint64_t page = std::uint64_t(::sysconf(_SC_PAGESIZE));
  const std::uint64_t from = offset / page * page, to = std::min(size_, offset + bytes);
  if (to > from) ::madvise(data_ + from, to - from, MADV_DONTNEED);
}

}  // namespace tidal::io
