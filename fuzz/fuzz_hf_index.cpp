// A Hugging Face model.safetensors.index.json (model.init_from of a sharded directory): the index
// is the input; beside it lie two real shards (written once, as save_pretrained names them),
// holding "a" and "b" in the first and "c" in the second. Every tensor the index accepts is viewed.
#include "fuzz_input.h"
#include "io/hf_weights.h"
#include "io/safetensors.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace {

using Tensors = std::vector<std::pair<std::string, tidal::Tensor>>;

void write_shards(const std::filesystem::path& dir) {
  using tidal::Tensor;
  const tidal::io::Metadata meta{{"format", "pt"}};
  tidal::io::save_safetensors((dir / "model-00001-of-00002.safetensors").string(),
                              Tensors{{"a", Tensor::full({2, 2}, 1.0f)}, {"b", Tensor::full({3}, 2.0f)}}, meta);
  tidal::io::save_safetensors((dir / "model-00002-of-00002.safetensors").string(),
                              Tensors{{"c", Tensor::full({4}, 3.0f)}}, meta);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool shards = (write_shards(tidal::fuzz::scratch_dir()), true);
  (void)shards;
  tidal::fuzz::write_input(data, size, "model.safetensors.index.json");
  return tidal::fuzz::expect_clean([&] {
    const tidal::io::HfWeightFiles files(tidal::fuzz::scratch_dir().string());
    for (const auto& [name, at] : files.tensors()) {
      const tidal::Tensor t = files.view(name);
      files.release(name);
    }
  });
}
