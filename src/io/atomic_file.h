// A file that appears at its path only when complete: written to "<path>.tmp.<pid>", flushed and
// fsynced, then renamed over the path (rename is atomic on POSIX file systems). If the writer
// dies or throws first, the old file at the path is untouched.
#pragma once

#include <cstddef>
#include <string>

namespace tidal::io {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary file if commit() was not reached
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void commit();

 private:
  std::string path_, tmp_path_;
  int fd_ = -1;
};

}  // namespace tidal::io
