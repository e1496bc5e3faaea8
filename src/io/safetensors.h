// safetensors files (the format of Hugging Face's library): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the
// raw little-endian tensor bytes. Writes are atomic: a temporary file, fsync, then rename.
// Reads memory-map the file: a tensor is a view of its pages, which are read only where touched,
// so a rank that copies its slices out of a large file never holds the rest.
#pragma once

#include "core/tensor.h"
#include "io/mapped_file.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tidal::io {

class AtomicFile;

// A dtype as safetensors names it ("F32", "BF16", "F16", "I32"), and back (none: not one of those).
const char* safetensors_dtype(DType t);
std::optional<DType> parse_safetensors_dtype(const std::string& name);

using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

// A safetensors file written tensor by tensor: every tensor's name, dtype and shape are given up
// front (the header comes first), then each tensor's bytes in that order, in pieces of any size,
// so a writer never holds more than a piece. commit() checks every byte came and makes the file
// appear (atomic_file.h); a writer dropped before it leaves nothing.
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::f32;
    Shape shape;
  };
  SafetensorsWriter(const std::string& path, const std::vector<Entry>& entries, const Metadata& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The file's first bytes: the header's length and the header (written already).
  const std::string& header() const { return header_; }
  // The next bytes of the tensors, in entry order.
  void append(const void* data, std::size_t bytes);
  // A host tensor's values (any strides: a strided one goes through a copy).
  void append(const Tensor& t);
  void commit();
  std::uint64_t file_bytes() const { return header_.size() + data_bytes_; }

 private:
  std::string header_;
  std::uint64_t data_bytes_ = 0, written_ = 0;
  std::unique_ptr<AtomicFile> file_;
};

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata = {});
void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata = {});

// One tensor of a file: its type, shape and bytes [begin, end) of the data section.
struct TensorEntry {
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};

// A safetensors file mapped read-only. The constructor validates the whole header (offsets inside
// the file and matching the shapes, known dtypes) and throws tidal::Error naming the file and the
// tensor for a missing, truncated or malformed file.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return map_.path(); }
  const std::map<std::string, TensorEntry>& entries() const { return entries_; }
  const Metadata& metadata() const { return metadata_; }
  // A view of the mapped bytes (valid while the reader lives); the name must be an entry.
  Tensor view(const std::string& name) const;
  // Gives the pages holding `name` back to the kernel (read again from the file if touched).
  void release(const std::string& name) const;
  std::uint64_t data_bytes() const { return data_size_; }
  std::uint64_t file_bytes() const { return map_.size(); }
  // The file's first bytes: the header's length and the header itself.
  std::span<const std::byte> header_bytes() const { return {map_.data(), std::size_t(data_ - map_.data())}; }

 private:
  std::map<std::string, TensorEntry> entries_;
  Metadata metadata_;
  MappedFile map_;  // a member: unmapped when a constructor that throws unwinds
  const std::byte* data_ = nullptr;  // the data section
  std::uint64_t data_size_ = 0;
};

struct SafetensorsFile {
  TensorMap tensors;
  Metadata metadata;
};
// Every tensor of the file, copied into memory of its own.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace tidal::io
