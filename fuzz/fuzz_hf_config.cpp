// A Hugging Face config.json (model.init_from's architecture), read through the family adapter
// its model_type names: GPT-2, BERT, ViT and Llama keys.
#include "fuzz_input.h"
#include "models/registry.h"

#include <filesystem>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = tidal::fuzz::write_input(data, size, "config.json");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return tidal::fuzz::expect_clean([&] {
    tidal::models::ModelConfig m;
    tidal::models::read_hf_config(dir, m);
  });
}
