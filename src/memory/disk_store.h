// The disk tier's file: fixed-size records of bytes in one file per process, the memory the
// disk tier (disk_tier.h) keeps optimizer states in, and a LoRA run's frozen base streamed from
// disk (frozen_stream.h) in one record. PatrickStar stops at the host
// (patrickstar-v2 sec. 7.4: "has not yet explore NVMe memory space"); ZeRO-Infinity goes on to
// NVMe, and so does this.
//
// - The file is created in memory.disk_dir under a name no other rank, run or leftover can hold:
//   rank, pid and a unique suffix (mkstemp). Its whole size is reserved up front (fallocate),
//   so a disk without room stops the run at start, not hundreds of steps in.
// - It is removed when the store goes (RAII: a run that ends in an error removes it too).
// - A record is read and written whole with pread/pwrite, looping over short transfers; any
//   failure (a full disk: ENOSPC) is a tidal::Error naming the file and memory.disk_dir.
// Transfers of different records may run on different threads (pread and pwrite take their offset;
// the byte counters are atomic).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tidal::memory {

class DiskStore {
 public:
  // `records` records of `record_bytes` each, in `dir` (memory.disk_dir): a tidal::Error naming
  // the key and the path when the directory does not exist, is not writable or has no room.
  DiskStore(const std::string& dir, int rank, std::size_t record_bytes, int records);
  ~DiskStore();
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  void write(int record, const void* from);
  void read(int record, void* into);
  // Bytes [offset, offset + bytes) of a record.
  void write(int record, std::size_t offset, std::size_t bytes, const void* from);
  void read(int record, std::size_t offset, std::size_t bytes, void* into);

  const std::string& path() const { return path_; }
  std::size_t record_bytes() const { return record_bytes_; }
  int records() const { return records_; }
  std::int64_t file_bytes() const { return std::int64_t(record_bytes_) * records_; }
  std::int64_t bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }
  std::int64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }

 private:
  std::int64_t offset_of(int record) const;

  std::string dir_, path_;
  std::size_t record_bytes_;
  int records_;
  int fd_ = -1;
  std::atomic<std::int64_t> bytes_written_{0}, bytes_read_{0};
};

}  // namespace tidal::memory
