// One rank's file of a checkpoint (metadata.h, format 2): the blocks it writes, as a safetensors
// file written under a temporary name, fsynced and renamed, with an XXH3 checksum of its header
// and of each block. A block's bytes are taken where they lie: host memory is written from its
// place, device memory and the disk tier's file go through one staging buffer of at most
// `buffer_bytes`, so writing a file never holds more than that beside the blocks themselves.
#pragma once

#include "core/allocator.h"
#include "engine/checkpoint/metadata.h"
#include "memory/chunk_manager.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tidal::engine {

struct BlockSource {
  std::string key;  // the global tensor's name
  Shape full_shape;  // the global tensor's
  Shape shape;      // as stored
  std::vector<Piece> pieces;
  memory::StateView bytes = {};  // fp32 of `shape` (memory: a contiguous tensor of its elements)
};

struct ShardWritten {
  StoredFile file;  // name, rank, bytes, header checksum
  std::vector<StoredBlock> blocks;  // in `sources` order (file index left 0)
  std::uint64_t data_bytes = 0;
  double seconds = 0;
};

// Writes `sources` to `dir`/rank_file_name(rank). The staging buffer comes from `staging`.
// tidal::Error naming the file on any failure (a full disk), the temporary removed.
ShardWritten write_shard(const std::string& dir, int rank, const std::vector<BlockSource>& sources,
                         std::size_t buffer_bytes, Allocator& staging);

}  // namespace tidal::engine
