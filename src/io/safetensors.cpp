#include "io/safetensors.h"

#include "io/atomic_file.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

namespace tidal::io {
namespace {

std::string st_dtype(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
  }
  TIDAL_ASSERT(false, "dtype {}", int(t));
}

DType parse_dtype(const std::string& s, const std::string& path, const std::string& name) {
  if (s == "F32") return DType::f32;
  if (s == "BF16") return DType::bf16;
  if (s == "F16") return DType::f16;
  if (s == "I32") return DType::i32;
  throw Error(fmt::format("{}: tensor '{}' has dtype {}, which tidal does not read (F32, BF16, F16, I32)", path, name, s));
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TIDAL_ASSERT(t.device().is_cpu() && t.is_contiguous(), "saving {} ({})", name, t.str());
    header[name] = {{"dtype", st_dtype(t.dtype())}, {"shape", t.shape().vec()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  AtomicFile out(path);
  const std::uint64_t n = text.size();
  out.write(&n, sizeof n);
  out.write(text.data(), text.size());
  for (const auto& entry : tensors) out.write(entry.second.raw(), entry.second.nbytes());
  out.commit();
}

void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  save_safetensors(path, std::vector<std::pair<std::string, Tensor>>(tensors.begin(), tensors.end()), metadata);
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TIDAL_CHECK(in.good(), "cannot open safetensors file '{}': check the path", path);
  in.seekg(0, std::ios::end);
  const std::uint64_t file_size = std::uint64_t(in.tellg());
  in.seekg(0);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  TIDAL_CHECK(in.good() && n <= file_size - 8, "'{}' is not a safetensors file (bad header length)", path);
  std::string text(n, '\0');
  in.read(text.data(), std::streamsize(n));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("'{}': malformed safetensors header: {}", path, e.what()));
  }
  const std::uint64_t data_size = file_size - 8 - n;
  SafetensorsFile f;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it.value().begin(); m != it.value().end(); ++m) f.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    const auto& v = it.value();
    const DType dt = parse_dtype(v.at("dtype").get<std::string>(), path, it.key());
    const Shape shape(v.at("shape").get<std::vector<std::int64_t>>());
    const auto off = v.at("data_offsets").get<std::vector<std::uint64_t>>();
    TIDAL_CHECK(off.size() == 2 && off[0] <= off[1] && off[1] <= data_size &&
                    off[1] - off[0] == std::uint64_t(shape.numel()) * dtype_size(dt),
                "'{}': tensor '{}' has inconsistent offsets (file truncated?)", path, it.key());
    Tensor t = Tensor::empty(shape, dt);
    in.seekg(std::streamoff(8 + n + off[0]));
    in.read(static_cast<char*>(t.raw()), std::streamsize(t.nbytes()));
    TIDAL_CHECK(in.good(), "'{}': could not read tensor '{}'", path, it.key());
    f.tensors.emplace(it.key(), std::move(t));
  }
  return f;
}

}  // namespace tidal::io
