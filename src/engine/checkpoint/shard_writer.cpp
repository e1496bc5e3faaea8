#include "engine/checkpoint/shard_writer.h"

#include "io/safetensors.h"
#include "io/checksum.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

namespace tidal::engine {

ShardWritten write_shard(const std::string& dir, int rank, const std::vector<BlockSource>& sources,
                         std::size_t buffer_bytes, Allocator& staging) {
  const auto start = std::chrono::steady_clock::now();
  const std::string name = rank_file_name(rank);
  const std::string path = (std::filesystem::path(dir) / name).string();
  ShardWritten out;
  out.file.name = name;
  out.file.rank = rank;

  std::vector<io::SafetensorsWriter::Entry> entries;
  std::uint64_t staged = 0;  // the largest block that goes through the buffer
  for (const BlockSource& s : sources) {
    const std::uint64_t bytes = std::uint64_t(s.shape.numel()) * sizeof(float);
    TIDAL_ASSERT(s.bytes.read || (s.bytes.memory.is_contiguous() && s.bytes.memory.nbytes() == bytes &&
                                  s.bytes.memory.dtype() == DType::f32),
                 "{}: a block of {} from {}", s.key, s.shape.str(), s.bytes.memory.str());
    entries.push_back({s.key, DType::f32, s.shape});
    if (s.bytes.read || !s.bytes.memory.device().is_cpu()) staged = std::max(staged, bytes);
  }
  try {
    io::SafetensorsWriter file(path, entries, {{"format", kCheckpointFormat}, {"rank", std::to_string(rank)}});
    out.file.header_checksum = io::checksum(file.header().data(), file.header().size());
    // The buffer: what one transfer moves, whole floats, no more than the largest staged block.
    const std::size_t chunk = std::max<std::size_t>(sizeof(float), std::min<std::size_t>(buffer_bytes, staged)) /
                              sizeof(float) * sizeof(float);
    Tensor buffer;
    if (staged > 0) buffer = Tensor::empty({std::int64_t(chunk / sizeof(float))}, DType::f32, staging);
    for (const BlockSource& s : sources) {
      const std::uint64_t bytes = std::uint64_t(s.shape.numel()) * sizeof(float);
      io::SegmentedChecksum sum(kChecksumSegmentBytes);
      const Tensor& m = s.bytes.memory;
      if (!s.bytes.read && m.device().is_cpu()) {
        sum.update(m.raw(), bytes);
        file.append(m.raw(), bytes);
      } else {
        const Tensor flat = s.bytes.read ? Tensor() : m.reshape({-1});
        for (std::uint64_t at = 0; at < bytes; at += chunk) {
          const std::uint64_t k = std::min<std::uint64_t>(chunk, bytes - at);
          const std::int64_t e = std::int64_t(at / sizeof(float)), n = std::int64_t(k / sizeof(float));
          if (s.bytes.read) s.bytes.read(at, k, buffer.raw());
          else buffer.slice(0, 0, n).copy_from(flat.slice(0, e, e + n));
          sum.update(buffer.raw(), k);
          file.append(buffer.raw(), k);
        }
      }
      out.blocks.push_back({.key = s.key, .shape = s.shape, .pieces = s.pieces, .checksums = sum.digests()});
      out.data_bytes += bytes;
    }
    out.file.bytes = file.file_bytes();
    file.commit();
  } catch (const Error& e) {
    throw Error(fmt::format("could not write '{}': {}", path, e.what()));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace tidal::engine
