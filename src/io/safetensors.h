// safetensors files (the format of Hugging Face's library): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the
// raw little-endian tensor bytes. Writes are atomic: a temporary file, fsync, then rename.
#pragma once

#include "core/tensor.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tidal::io {

using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata = {});
void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata = {});

struct SafetensorsFile {
  TensorMap tensors;
  Metadata metadata;
};
// Throws tidal::Error naming the file for a missing, truncated or malformed file.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace tidal::io
