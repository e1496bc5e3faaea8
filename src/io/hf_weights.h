// The weight files of a Hugging Face model directory: model.safetensors, or the shards that
// model.safetensors.index.json lists (its weight_map: tensor name -> file). Reading maps every
// file (io/safetensors.h), so a tensor's bytes are read only where a caller copies them.
// (Writing them: engine/hf_checkpoint.h's export.)
#pragma once

#include "io/safetensors.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tidal::io {

class HfWeightFiles {
 public:
  // Throws tidal::Error naming the file: no weights in the directory (or only pytorch_model.bin),
  // a malformed index, a shard it names that is missing, a tensor missing from its shard.
  explicit HfWeightFiles(const std::string& dir);

  // Every tensor name, with the file that holds it.
  const std::map<std::string, std::pair<const SafetensorsReader*, TensorEntry>>& tensors() const { return tensors_; }
  Tensor view(const std::string& name) const;
  void release(const std::string& name) const;
  // Which file holds `name` (for messages).
  const std::string& file_of(const std::string& name) const;
  std::uint64_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, std::pair<const SafetensorsReader*, TensorEntry>> tensors_;
};

}  // namespace tidal::io
