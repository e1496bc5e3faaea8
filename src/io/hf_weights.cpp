#include "io/hf_weights.h"


#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace tidal::io {
namespace fs = std::filesystem;

HfWeightFiles::HfWeightFiles(const std::string& dir) {
  const fs::path root(dir), single = root / "model.safetensors", index = root / "model.safetensors.index.json";
  auto add_file = [&](const fs::path& p) -> const SafetensorsReader& {
    files_.push_back(std::make_unique<SafetensorsReader>(p.string()));
    return *files_.back();
  };
  if (fs::exists(single)) {
    const SafetensorsReader& f = add_file(single);
    for (const auto& [name, entry] : f.entries()) tensors_.emplace(name, std::make_pair(&f, entry));
    return;
  }
  TIDAL_CHECK(fs::exists(index), "model.init_from: '{}' holds neither model.safetensors nor "
              "model.safetensors.index.json{}", dir,
              fs::exists(root / "pytorch_model.bin")
                  ? " (its pytorch_model.bin is a pickle tidal does not read: save the model again with "
                    "save_pretrained(dir, safe_serialization=True))"
                  : "");
  nlohmann::json j;
  try {
    std::ifstream in(index);
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("'{}': malformed JSON: {}", index.string(), e.what()));
  }
  TIDAL_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
              "'{}' has no \"weight_map\" object (name -> shard file)", index.string());
  std::map<std::string, const SafetensorsReader*> by_file;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    TIDAL_CHECK(it.value().is_string(), "'{}': weight_map[\"{}\"] is not a file name", index.string(), it.key());
    const std::string file = it.value().get<std::string>();
    TIDAL_CHECK(file.find('/') == std::string::npos && file.find("..") == std::string::npos,
                "'{}': weight_map[\"{}\"] = \"{}\" is not a file of the directory", index.string(), it.key(), file);
    if (!by_file.count(file)) {
      TIDAL_CHECK(fs::exists(root / file), "'{}' names shard '{}' (for '{}'), which is missing from '{}'",
                  index.string(), file, it.key(), dir);
      by_file[file] = &add_file(root / file);
    }
    const SafetensorsReader* f = by_file[file];
    const auto e = f->entries().find(it.key());
    TIDAL_CHECK(e != f->entries().end(), "'{}' maps '{}' to '{}', which has no such tensor", index.string(),
                it.key(), f->path());
    tensors_.emplace(it.key(), std::make_pair(f, e->second));
  }
}

Tensor HfWeightFiles::view(const std::string& name) const { return tensors_.at(name).first->view(name); }

void HfWeightFiles::release(const std::string& name) const { tensors_.at(name).first->release(name); }

const std::string& HfWeightFiles::file_of(const std::string& name) const { return tensors_.at(name).first->path(); }

std::uint64_t HfWeightFiles::total_bytes() const {
  std::uint64_t n = 0;
  for (const auto& [name, at] : tensors_) n += at.second.end - at.second.begin;
  return n;
}

}  // namespace tidal::io
