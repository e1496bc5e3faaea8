#include "io/safetensors.h"

#include "io/atomic_file.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>

namespace tidal::io {
namespace {

DType parse_dtype(const std::string& s, const std::string& path, const std::string& name) {
  const std::optional<DType> t = parse_safetensors_dtype(s);
  TIDAL_CHECK(t, "{}: tensor '{}' has dtype {}, which tidal does not read (F32, BF16, F16, I32, U8)", path, name, s);
  return *t;
}

// The header's entry for one tensor, checked against the data section's size.
TensorEntry parse_entry(const nlohmann::json& v, std::uint64_t data_size, const std::string& path,
                        const std::string& name) {
  TIDAL_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
              "'{}': tensor '{}' lacks dtype, shape or data_offsets in the header (not a safetensors file?)", path,
              name);
  // Arrays of whole numbers of at most 2^63 - 1 (a fraction or a larger number converted to an
  // integer is undefined behaviour: the fuzzer's 3.7e71 as an extent).
  const auto naturals = [&](const char* key) {
    const nlohmann::json& a = v.at(key);
    TIDAL_CHECK(a.is_array(), "'{}': tensor '{}' has a {} that is not an array", path, name, key);
    std::vector<std::uint64_t> out;
    for (const nlohmann::json& x : a) {
      TIDAL_CHECK(x.is_number_unsigned() && x.get<std::uint64_t>() <= std::uint64_t(INT64_MAX),
                  "'{}': tensor '{}' has {} entry {}, not a whole number from 0 to 2^63 - 1", path, name, key, x.dump());
      out.push_back(x.get<std::uint64_t>());
    }
    return out;
  };
  TensorEntry e;
  TIDAL_CHECK(v.at("dtype").is_string(), "'{}': tensor '{}' has a dtype that is not a string", path, name);
  e.dtype = parse_dtype(v.at("dtype").get<std::string>(), path, name);
  const std::vector<std::uint64_t> dims = naturals("shape"), off = naturals("data_offsets");
  TIDAL_CHECK(off.size() == 2 && off[0] <= off[1] && off[1] <= data_size,
              "'{}': tensor '{}' has inconsistent offsets (file truncated?)", path, name);
  // The extents' product, stopped once it passes the bytes the offsets span (no overflow).
  std::uint64_t bytes = dtype_size(e.dtype);
  const std::uint64_t span = off[1] - off[0], past = ~std::uint64_t(0);
  for (const std::uint64_t d : dims) {
    if (d == 0 || bytes == 0) bytes = 0;
    else bytes = bytes > span / d ? past : bytes * d;
  }
  TIDAL_CHECK(bytes == span, "'{}': tensor '{}' has offsets that do not span its shape (file truncated?)",
              path, name);
  e.shape = Shape(std::vector<std::int64_t>(dims.begin(), dims.end()));
  e.begin = off[0];
  e.end = off[1];
  return e;
}

}  // namespace

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
  }
  TIDAL_ASSERT(false, "dtype {}", int(t));
}

std::optional<DType> parse_safetensors_dtype(const std::string& name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u8})
    if (name == safetensors_dtype(t)) return t;
  return std::nullopt;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Entry>& entries,
                                     const Metadata& metadata) {
  nlohmann::json header = nlohmann::json::object();
  for (const Entry& e : entries) {
    const std::uint64_t bytes = std::uint64_t(e.shape.numel()) * dtype_size(e.dtype);
    header[e.name] = {{"dtype", safetensors_dtype(e.dtype)}, {"shape", e.shape.vec()}, {"data_offsets", {data_bytes_, data_bytes_ + bytes}}};
    data_bytes_ += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section 8-byte aligned
  const std::uint64_t n = text.size();
  header_.assign(reinterpret_cast<const char*>(&n), sizeof n);
  header_ += text;
  file_ = std::make_unique<AtomicFile>(path);
  file_->write(header_.data(), header_.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::append(const void* data, std::size_t bytes) {
  TIDAL_ASSERT(written_ + bytes <= data_bytes_, "{} bytes past the {} the header holds", written_ + bytes, data_bytes_);
  file_->write(data, bytes);
  written_ += bytes;
}

void SafetensorsWriter::append(const Tensor& t) {
  TIDAL_ASSERT(t.device().is_cpu(), "writing {}", t.str());
  if (t.is_contiguous()) return append(t.raw(), t.nbytes());
  const Tensor c = t.clone(host_allocator());
  append(c.raw(), c.nbytes());
}

void SafetensorsWriter::commit() {
  TIDAL_ASSERT(written_ == data_bytes_, "{} of the {} bytes the header holds written", written_, data_bytes_);
  file_->commit();
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata) {
  std::vector<SafetensorsWriter::Entry> entries;
  for (const auto& [name, t] : tensors) entries.push_back({name, t.dtype(), t.shape()});
  SafetensorsWriter out(path, entries, metadata);
  for (const auto& [name, t] : tensors) out.append(t);
  out.commit();
}

void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  save_safetensors(path, std::vector<std::pair<std::string, Tensor>>(tensors.begin(), tensors.end()), metadata);
}

SafetensorsReader::SafetensorsReader(const std::string& path) : map_(path) {
  const std::uint64_t map_size = map_.size();
  TIDAL_CHECK(map_size >= 8, "'{}' is not a safetensors file ({} bytes, shorter than its header length)", path,
              map_size);
  const std::byte* bytes = map_.data();
  std::uint64_t n = 0;
  std::memcpy(&n, bytes, sizeof n);
  TIDAL_CHECK(n >= 2 && n <= map_size - 8, "'{}' is not a safetensors file (bad header length; truncated?)", path);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes) + 8, reinterpret_cast<const char*>(bytes) + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("'{}': malformed safetensors header: {}", path, e.what()));
  }
  TIDAL_CHECK(header.is_object(), "'{}': malformed safetensors header (not a JSON object)", path);
  data_ = bytes + 8 + n;
  data_size_ = map_size - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      TIDAL_CHECK(it.value().is_object(), "'{}': metadata is not a JSON object of strings", path);
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        TIDAL_CHECK(m.value().is_string(), "'{}': metadata '{}' is not a string", path, m.key());
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    entries_.emplace(it.key(), parse_entry(it.value(), data_size_, path, it.key()));
  }
}

Tensor SafetensorsReader::view(const std::string& name) const {
  const auto it = entries_.find(name);
  TIDAL_ASSERT(it != entries_.end(), "'{}' has no tensor '{}'", path(), name);
  return Tensor::view_of(const_cast<std::byte*>(data_ + it->second.begin), it->second.shape, it->second.dtype);
}

void SafetensorsReader::release(const std::string& name) const {
  const auto it = entries_.find(name);
  TIDAL_ASSERT(it != entries_.end(), "'{}' has no tensor '{}'", path(), name);
  const std::uint64_t at = std::uint64_t(data_ - map_.data()) + it->second.begin;
  map_.release(at, it->second.end - it->second.begin);
}

SafetensorsFile load_safetensors(const std::string& path) {
  const SafetensorsReader reader(path);
  SafetensorsFile f;
  f.metadata = reader.metadata();
  for (const auto& [name, entry] : reader.entries()) f.tensors.emplace(name, reader.view(name).clone());
  return f;
}

}  // namespace tidal::io
