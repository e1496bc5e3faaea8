// A token shard (llm.c's format: header, then uint16 or uint32 tokens): loaded, then every
// training and eval window read.
#include "data/token_file.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tidal::data;
  const std::string path = tidal::fuzz::write_input(data, size, "tokens.bin");
  return tidal::fuzz::expect_clean([&] {
    const TokenFileDataset d(path, TokenFileDataset::Format::tokens, 4, 64, Objective::causal, 1);
    for (std::int64_t i = 0; i < 8; ++i) {
      d.sequence(i, Split::train);
      d.sequence(i, Split::eval);
    }
  });
}
