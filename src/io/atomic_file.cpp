#include "io/atomic_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace tidal::io {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  tmp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TIDAL_CHECK(fd_ >= 0, "cannot create '{}': {} (check that the directory exists and is writable)", tmp_path_,
              std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    TIDAL_CHECK(n > 0, "writing '{}' failed: {}", tmp_path_, std::strerror(errno));
    p += n;
    bytes -= std::size_t(n);
  }
}

void AtomicFile::commit() {
  TIDAL_CHECK(::fsync(fd_) == 0, "fsync of '{}' failed: {}", tmp_path_, std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  TIDAL_CHECK(std::rename(tmp_path_.c_str(), path_.c_str()) == 0, "renaming '{}' to '{}' failed: {}", tmp_path_, path_,
              std::strerror(errno));
  // Make the rename itself durable.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace tidal::io
