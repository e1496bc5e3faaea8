// A token shard (llm.c's format: header, then uint16 or uint32 tokens): opened, then training and
// eval windows read.
#include "data/stream_dataset.h"
#include "data/token_shards.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tidal::data;
  const std::string path = tidal::fuzz::write_input(data, size, "tokens.bin");
  return tidal::fuzz::expect_clean([&] {
    const StreamDataset d(std::make_unique<TokenShards>(path, "data.path"), true, 4, 64, Objective::causal, 1,
                          "data.path");
    for (std::int64_t i = 0; i < 8; ++i) {
      d.sequence(i, Split::train);
      d.sequence(i, Split::eval);
    }
  });
}
