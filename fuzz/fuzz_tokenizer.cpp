// A tokenizer.json (byte-level BPE: vocabulary, merges, added tokens), loaded, then used on a
// mixed text and decoded back.
#include "data/bpe_tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using tidal::data::BpeTokenizer;
  const std::string path = tidal::fuzz::write_input(data, size, "tokenizer.json");
  return tidal::fuzz::expect_clean([&] {
    const BpeTokenizer t = BpeTokenizer::from_file(path);
    const auto ids = t.encode("Hello, world! 12 émigré\n\tok");
    t.decode(ids);
  });
}
