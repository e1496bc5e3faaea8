// The TOML config: parse, apply, validate (config::load_config_text, what -c FILE reads).
#include "config/config.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return tidal::fuzz::expect_clean([&] { tidal::config::load_config_text(text, "fuzz.toml"); });
}
