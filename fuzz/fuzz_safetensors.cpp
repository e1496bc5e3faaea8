// A safetensors file: the header's validation, then every tensor read (load_safetensors copies
// each one out of the mapped file, so an offset the header let through would be read here).
#include "fuzz_input.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = tidal::fuzz::write_input(data, size, "model.safetensors");
  return tidal::fuzz::expect_clean([&] { tidal::io::load_safetensors(path); });
}
