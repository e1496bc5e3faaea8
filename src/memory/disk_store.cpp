#include "memory/disk_store.h"

#include "core/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace tidal::memory {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

DiskStore::DiskStore(const std::string& dir, int rank, std::size_t record_bytes, int records)
    : dir_(dir), record_bytes_(record_bytes), records_(records) {
  TIDAL_ASSERT(records >= 0, "a disk store of {} records", records);
  TIDAL_CHECK(!dir.empty(), "memory.disk_dir is empty: name a writable directory for the disk tier");
  // mkstemp's suffix keeps the name unique even beside a file a killed run left behind with a pid
  // that has come round again.
  std::string name = dir + (dir.back() == '/' ? "" : "/") + fmt::format("tidal-rank{}-pid{}-XXXXXX", rank, ::getpid());
  std::vector<char> buffer(name.begin(), name.end());
  buffer.push_back('\0');
  fd_ = ::mkostemp(buffer.data(), O_CLOEXEC);
  TIDAL_CHECK(fd_ >= 0,
              "memory.disk_dir = \"{}\": cannot create the disk tier's file there ({}): make it an existing, writable "
              "directory, or leave memory.disk_dir unset",
              dir, errno_text(errno));
  path_ = buffer.data();
  // Every record's room now: a full disk is found at start. A file system without fallocate
  // gets a sparse file instead (not posix_fallocate, whose fallback writes every block), and a
  // full disk is then found by a write. Either way the file reads as zeros until written.
  if (const std::int64_t bytes = file_bytes(); bytes > 0) {
    int err = ::fallocate(fd_, 0, 0, off_t(bytes)) == 0 ? 0 : errno;
    if (err == EOPNOTSUPP) err = ::ftruncate(fd_, off_t(bytes)) == 0 ? 0 : errno;
    if (err != 0) {
      ::close(fd_);
      ::unlink(path_.c_str());
      throw Error(fmt::format("memory.disk_dir = \"{}\": cannot reserve {} bytes for the optimizer states in {} ({}): "
                              "free room on that disk, or point memory.disk_dir at a larger one",
                              dir, bytes, path_, errno_text(err)));
    }
  }
}

DiskStore::~DiskStore() {
  ::close(fd_);
  ::unlink(path_.c_str());
}

std::int64_t DiskStore::offset_of(int record) const {
  TIDAL_ASSERT(record >= 0 && record < records_, "record {} of a disk store of {}", record, records_);
  return std::int64_t(record) * std::int64_t(record_bytes_);
}

void DiskStore::write(int record, const void* from) { write(record, 0, record_bytes_, from); }

void DiskStore::write(int record, std::size_t offset, std::size_t bytes, const void* from) {
  TIDAL_ASSERT(offset + bytes <= record_bytes_, "bytes [{}, +{}) of a record of {}", offset, bytes, record_bytes_);
  const std::int64_t at = offset_of(record) + std::int64_t(offset);
  const char* p = static_cast<const char*>(from);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd_, p + done, bytes - done, off_t(at + std::int64_t(done)));
    if (n < 0 && errno == EINTR) continue;
    // pwrite returns 0 only for a zero-length request; a short count continues where it stopped.
    if (n <= 0)
      throw Error(fmt::format("the disk tier could not write {} bytes at offset {} of {} ({}): free room in "
                              "memory.disk_dir = \"{}\", or point it at another disk",
                              bytes - done, at + std::int64_t(done), path_,
                              n < 0 ? errno_text(errno) : "no progress", dir_));
    done += std::size_t(n);
  }
  bytes_written_.fetch_add(std::int64_t(bytes), std::memory_order_relaxed);
}

void DiskStore::read(int record, void* into) { read(record, 0, record_bytes_, into); }

void DiskStore::read(int record, std::size_t offset, std::size_t bytes, void* into) {
  TIDAL_ASSERT(offset + bytes <= record_bytes_, "bytes [{}, +{}) of a record of {}", offset, bytes, record_bytes_);
  const std::int64_t at = offset_of(record) + std::int64_t(offset);
  char* p = static_cast<char*>(into);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, p + done, bytes - done, off_t(at + std::int64_t(done)));
    if (n < 0 && errno == EINTR) continue;
    // 0: the file ends early (someone truncated it under the run).
    if (n <= 0)
      throw Error(fmt::format("the disk tier could not read {} bytes at offset {} of {} ({}); the file in "
                              "memory.disk_dir = \"{}\" must stay untouched while the run lasts",
                              bytes - done, at + std::int64_t(done), path_,
                              n < 0 ? errno_text(errno) : "end of file", dir_));
    done += std::size_t(n);
  }
  bytes_read_.fetch_add(std::int64_t(bytes), std::memory_order_relaxed);
}

}  // namespace tidal::memory
