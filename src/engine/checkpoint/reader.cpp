#include "engine/checkpoint/reader.h"

#include "io/checksum.h"
#include "nn/tp/shard.h"

#include <algorithm>
#include <filesystem>

namespace tidal::engine {
namespace fs = std::filesystem;

CheckpointReader::CheckpointReader(const std::string& path)
    : meta_(read_metadata(checkpoint_step_dir(path))), files_(meta_.files.size()) {}

config::Config CheckpointReader::stored_config() const {
  TIDAL_CHECK(!info().config_toml.empty(), "'{}': the checkpoint stores no config", step_dir());
  return config::load_config_text(info().config_toml, step_dir() + " (stored config)");
}

const StoredTensor& CheckpointReader::tensor(const std::string& name) const {
  const auto it = meta_.tensors.find(name);
  TIDAL_CHECK(it != meta_.tensors.end(), "checkpoint '{}' has no tensor '{}': was it saved from another model config?",
              step_dir(), name);
  return it->second;
}

const io::SafetensorsReader& CheckpointReader::file(int index) {
  std::unique_ptr<io::SafetensorsReader>& f = files_[std::size_t(index)];
  if (f) return *f;
  const StoredFile& s = meta_.files[std::size_t(index)];
  const std::string path = (fs::path(step_dir()) / s.name).string();
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  TIDAL_CHECK(!ec, "checkpoint '{}': its file '{}' (rank {}'s) is missing: {}", step_dir(), s.name, s.rank,
              ec.message());
  TIDAL_CHECK(size == s.bytes, "checkpoint '{}': '{}' holds {} bytes but the metadata says {}: the file is {}",
              step_dir(), path, size, s.bytes, size < s.bytes ? "truncated" : "damaged");
  f = std::make_unique<io::SafetensorsReader>(path);
  if (s.header_checksum) {
    const std::span<const std::byte> h = f->header_bytes();
    TIDAL_CHECK(io::checksum(h.data(), h.size()) == *s.header_checksum,
                "checkpoint '{}': the header of '{}' does not match its checksum: the file is damaged", step_dir(),
                path);
  }
  return *f;
}

Tensor CheckpointReader::block(const StoredBlock& b) {
  const io::SafetensorsReader& f = file(b.file);
  const auto entry = f.entries().find(b.key);
  TIDAL_CHECK(entry != f.entries().end() && entry->second.shape == b.shape,
              "checkpoint '{}': '{}' has no tensor '{}' of shape {} as the metadata says", step_dir(), f.path(), b.key,
              b.shape.str());
  return f.view(b.key);
}

void CheckpointReader::verify(const StoredBlock& b, const Tensor& v, std::uint64_t begin, std::uint64_t end) {
  if (b.checksums.empty() || begin >= end) return;
  const std::uint64_t segment = meta_.checksum_segment_bytes;
  for (std::uint64_t k = begin / segment; k <= (end - 1) / segment; ++k) {
    if (!verified_.insert({b.file, b.key, k}).second) continue;
    const std::uint64_t from = k * segment, to = std::min<std::uint64_t>(v.nbytes(), from + segment);
    TIDAL_CHECK(io::checksum(static_cast<const std::byte*>(v.raw()) + from, to - from) == b.checksums[k],
                "checkpoint '{}': tensor '{}' in '{}' does not match its checksum (bytes {} to {}): the file is "
                "damaged (a flipped or lost byte); resume from an earlier checkpoint",
                step_dir(), b.key, files_[std::size_t(b.file)]->path(), from, to);
  }
}

std::int64_t CheckpointReader::copy_into(const std::string& name, void* dst, const std::vector<Piece>& pieces) {
  const StoredTensor& t = tensor(name);
  const std::uint64_t element = dtype_size(t.dtype);
  std::int64_t copied = 0;
  for (const StoredBlock& b : t.blocks) {
    // The rows of the block that hold elements these pieces need: only their bytes are read.
    std::int64_t first = b.shape[0], last = 0;
    for (const Piece& from : b.pieces)
      for (const Piece& to : pieces) {
        if (overlap_elements(from.slice, to.slice) == 0) continue;
        const std::int64_t lo = std::max(from.slice.start[0], to.slice.start[0]) - from.slice.start[0];
        const std::int64_t hi =
            std::min(from.slice.start[0] + from.slice.extent[0], to.slice.start[0] + to.slice.extent[0]) -
            from.slice.start[0];
        first = std::min(first, from.row + lo);
        last = std::max(last, from.row + hi);
      }
    if (first >= last) continue;
    const Tensor v = block(b);
    const std::uint64_t row_bytes = std::uint64_t(b.shape.numel() / b.shape[0]) * element;
    verify(b, v, std::uint64_t(first) * row_bytes, std::uint64_t(last) * row_bytes);
    copied += copy_overlap(v.raw(), b.pieces, dst, pieces, element);
    files_[std::size_t(b.file)]->release(b.key);  // its pages back to the kernel
  }
  return copied;
}

void CheckpointReader::read_block(const std::string& name, const nn::Parameter& p, Tensor into) {
  const StoredTensor& t = tensor(name);
  const Shape& full = p.full_shape.size() ? p.full_shape : p.shape;
  TIDAL_CHECK(t.shape == full && t.dtype == into.dtype(), "checkpoint '{}': '{}' is {} {} but the model has {} {}",
              step_dir(), name, dtype_name(t.dtype), t.shape.str(), dtype_name(into.dtype()), full.str());
  TIDAL_ASSERT(into.shape() == p.shape, "{}: reading into {}", name, into.str());
  Tensor host = on_host(into, false);
  if (!host.is_contiguous()) host = Tensor::empty(p.shape, into.dtype(), host_allocator());
  host.zero_();  // the padding rows (the pieces cover the rest)
  const std::vector<Piece> pieces = nn::tp::pieces_of(p);
  const std::int64_t copied = copy_into(name, host.raw(), pieces);
  TIDAL_CHECK(copied == block_elements(pieces),
              "checkpoint '{}': its blocks of '{}' cover {} of the {} elements this rank needs (blocks missing or "
              "overlapping: a damaged metadata.json?)",
              step_dir(), name, copied, block_elements(pieces));
  if (host.raw() != into.raw()) into.copy_from(host);
}

Tensor CheckpointReader::read_whole(const std::string& name, Allocator& alloc) {
  const StoredTensor& t = tensor(name);
  Tensor out = Tensor::empty(t.shape, t.dtype, alloc);
  const std::vector<Piece> whole{{.row = 0, .slice = {Shape(std::vector<std::int64_t>(std::size_t(t.shape.size()), 0)),
                                                      t.shape}}};
  const std::int64_t copied = copy_into(name, out.raw(), whole);
  TIDAL_CHECK(copied == t.shape.numel(),
              "checkpoint '{}': its blocks of '{}' cover {} of its {} elements (blocks missing or overlapping: a "
              "damaged metadata.json?)",
              step_dir(), name, copied, t.shape.numel());
  return out;
}

std::uint64_t CheckpointReader::verify_all() {
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < meta_.files.size(); ++i) file(int(i));
  for (const auto& [name, t] : meta_.tensors)
    for (const StoredBlock& b : t.blocks) {
      const Tensor v = block(b);
      verify(b, v, 0, v.nbytes());
      bytes += v.nbytes();
      files_[std::size_t(b.file)]->release(b.key);
    }
  return bytes;
}

}  // namespace tidal::engine
