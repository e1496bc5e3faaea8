// The disk tier (memory.disk_dir): the optimizer states of the chunks the host tier cannot hold
// under memory.host_limit, in a file (disk_store.h), and the two host staging buffers through
// which everything reads and writes them.
//
// A chunk's fp32 master copy, momentum and variance are one record, back to back. stage(c)
// hands out chunk c's record in a staging buffer; the buffers are a write-back cache of two
// chunks: a buffer is written back to the file, if its chunk was staged to be modified, only
// when it is reused for another chunk, so nothing but stage() ever reads the file and every
// reader sees the latest states. Users of the states (AdamW, checkpoints, resume) go through the
// chunks in list order, so when stage(c) moves to a new chunk a thread reads the next disk chunk
// after c (after the last: the first, for the next step) into the other buffer, writing back what
// it held first, while the caller works on c. One transfer is in flight at a time; the thread is
// joined before either buffer changes hands.
//
// The staging buffers come from the host tier and count against memory.host_limit.
#pragma once

#include "core/allocator.h"
#include "core/tensor.h"
#include "memory/disk_store.h"

#include <exception>
#include <map>
#include <thread>
#include <vector>

namespace tidal::memory {

class DiskTier {
 public:
  // The states of `chunks` (each `kinds` lists of `chunk_elements` fp32) live in a file in `dir`.
  // `read_ahead`: the next chunk is read on a thread (off: every stage of a chunk not in a buffer
  // reads it then).
  DiskTier(const std::string& dir, int rank, std::int64_t chunk_elements, int kinds, std::vector<int> chunks,
           Allocator& host, bool read_ahead);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  bool holds(int chunk) const { return record_.count(chunk) != 0; }
  const std::vector<int>& chunks() const { return chunks_; }
  // Chunk c's states, [kinds * chunk_elements] fp32 in host memory, valid until the next stage()
  // of another chunk. `modify`: the caller writes them (they go back to the file later).
  Tensor stage(int chunk, bool modify);

  // For a checkpoint: the file made to hold every chunk's latest states (the read-ahead joined,
  // modified buffers written back and kept, now clean), so that read_states may read it on
  // another thread until the next stage() to modify.
  void flush();
  // Bytes [offset, offset + bytes) of chunk c's record (kinds * chunk_elements fp32), from the file.
  void read_states(int chunk, std::size_t offset, std::size_t bytes, void* into);

  const DiskStore& store() const { return store_; }
  // Bytes of the transfers stage() has started (those the read-ahead runs counted when it starts
  // them, so a step's count does not depend on how far the thread got).
  std::int64_t bytes_to_disk() const { return bytes_to_disk_; }
  std::int64_t bytes_from_disk() const { return bytes_from_disk_; }
  // Seconds the caller spent in stage(): transfers of its own and waits for the read-ahead.
  double seconds() const { return seconds_; }

 private:
  struct Staging {
    Tensor states;  // [kinds * chunk_elements] fp32
    int chunk = -1;  // whose states it holds; -1: none
    bool modified = false;
  };
  // s's states back to the file if modified, then chunk's into s; counted where it is started.
  void count_fill(const Staging& s);
  void fill(Staging& s, int chunk);
  // The read-ahead done; its error, if any, rethrown here.
  void join_read_ahead();

  std::vector<int> chunks_;     // in list order
  std::map<int, int> record_;   // chunk -> its record in the store
  DiskStore store_;
  bool read_ahead_;
  Staging staging_[2];
  int current_ = 0;  // staging_[current_] holds the chunk staged last
  std::thread reader_;  // filling staging_[1 - current_]
  std::exception_ptr reader_error_;
  std::int64_t bytes_to_disk_ = 0, bytes_from_disk_ = 0;
  double seconds_ = 0;
};

}  // namespace tidal::memory
