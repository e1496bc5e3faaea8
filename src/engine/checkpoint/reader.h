// Reading a checkpoint of either format (metadata.h) into any layout: a rank asks for the block of
// each tensor it holds and gets it assembled from whichever stored blocks overlap it. Files are
// memory-mapped and opened only when a block in them is needed; a block's pages are read when
// it is copied from and given back to the kernel after, so a rank reads the byte ranges of the
// blocks it needs and never holds whole files. What it reads is checked first: the segments of a
// block (8 MiB each) that hold the rows it copies, against their checksums (each once per
// reader), and every file against its size and header checksum when opened: a truncated or
// damaged file is a tidal::Error naming it, never a silent wrong weight.
#pragma once

#include "config/config.h"
#include "core/tensor.h"
#include "engine/checkpoint/metadata.h"
#include "io/safetensors.h"
#include "nn/parameter.h"

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace tidal::engine {

class CheckpointReader {
 public:
  // `path`: a step directory, or a checkpoint directory (its `latest`).
  explicit CheckpointReader(const std::string& path);

  const CheckpointMetadata& metadata() const { return meta_; }
  const CheckpointInfo& info() const { return meta_.info; }
  const std::string& step_dir() const { return meta_.info.path; }
  bool has(const std::string& name) const { return meta_.tensors.count(name) != 0; }
  // The config of the run that saved it.
  config::Config stored_config() const;

  // p's block (p.shape; its padding rows zero) of global tensor `name` (p.name for its weight,
  // "m." / "v." + p.name for its moments) into `into`, on any device. tidal::Error naming the
  // checkpoint and the tensor when it is missing, of another shape or dtype, or not all there.
  void read_block(const std::string& name, const nn::Parameter& p, Tensor into);
  // The whole tensor, in memory from `alloc`.
  Tensor read_whole(const std::string& name, Allocator& alloc = host_allocator());

  // Checks every block of every file against its checksum (reading all of them); the bytes checked.
  std::uint64_t verify_all();

 private:
  const StoredTensor& tensor(const std::string& name) const;
  // Into `dst` (contiguous host memory of `pieces`): every stored block's overlap with them.
  std::int64_t copy_into(const std::string& name, void* dst, const std::vector<Piece>& pieces);
  const io::SafetensorsReader& file(int index);
  // The block's bytes, mapped.
  Tensor block(const StoredBlock& b);
  // Checks the segments of block `b` (mapped at `v`) that hold bytes [begin, end) against their
  // checksums, each once per reader.
  void verify(const StoredBlock& b, const Tensor& v, std::uint64_t begin, std::uint64_t end);

  CheckpointMetadata meta_;
  std::vector<std::unique_ptr<io::SafetensorsReader>> files_;  // by index, opened when needed
  std::set<std::tuple<int, std::string, std::uint64_t>> verified_;  // (file, key, segment)
};

}  // namespace tidal::engine
