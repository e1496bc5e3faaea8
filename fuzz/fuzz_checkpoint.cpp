// A checkpoint's metadata.json (tidal train --resume, tidal export, tidal checkpoint): the
// metadata is the input; beside it lies a real rank file (written once) holding "w" [4, 3] as two
// blocks of rows, "w.a" and "w.b". Every tensor the metadata accepts is read whole, and every
// block checked against its checksum.
#include "engine/checkpoint/reader.h"
#include "fuzz_input.h"
#include "io/safetensors.h"

#include <string>
#include <utility>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool file = [] {
    using tidal::Tensor;
    tidal::io::save_safetensors((tidal::fuzz::scratch_dir() / "rank-00000.safetensors").string(),
                                std::vector<std::pair<std::string, Tensor>>{{"w.a", Tensor::full({2, 3}, 1.0f)},
                                                                            {"w.b", Tensor::full({2, 3}, 2.0f)}},
                                {{"format", "tidal-checkpoint-2"}});
    return true;
  }();
  (void)file;
  tidal::fuzz::write_input(data, size, "metadata.json");
  return tidal::fuzz::expect_clean([&] {
    tidal::engine::CheckpointReader reader(tidal::fuzz::scratch_dir().string());
    for (const auto& [name, t] : reader.metadata().tensors) (void)reader.read_whole(name);
    reader.verify_all();
  });
}
