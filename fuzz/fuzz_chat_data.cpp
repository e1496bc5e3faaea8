// Chat data (data.kind = "chat"): a JSON-lines file of conversations, opened over a byte-level
// tokenizer with ChatML's special tokens (one token a byte, so the packing sees long
// conversations), then every packed sequence and a batch of each split read.
#include "data/chat_dataset.h"
#include "fuzz_input.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace {

// The tokenizer.json, written once: 256 byte tokens, no merges, the special tokens after them.
const std::string& tokenizer_path() {
  static const std::string path = [] {
    nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
    for (unsigned b = 0; b < 256; ++b) vocab[tidal::data::byte_level_spelling(static_cast<unsigned char>(b))] = b;
    const char* special[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};
    for (unsigned i = 0; i < 3; ++i)
      added.push_back({{"id", 256 + i}, {"content", special[i]}, {"special", true}, {"normalized", false}});
    const nlohmann::json t{{"added_tokens", added},
                           {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                           {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
    const std::string p = (tidal::fuzz::scratch_dir() / "tokenizer.json").string();
    std::ofstream(p) << t.dump();
    return p;
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tidal::data;
  const std::string& tokenizer = tokenizer_path();
  const std::string path = tidal::fuzz::write_input(data, size, "chats.jsonl");
  return tidal::fuzz::expect_clean([&] {
    const ChatDataset d(path, "data.path", {.tokenizer = tokenizer, .chat_template = ChatTemplate::chatml}, true, 31,
                        300, 1);
    for (std::int64_t s = 0; s < std::min<std::int64_t>(d.sequences(), 16); ++s) d.sequence_at(s);
    d.batch(0, 2, Split::train);
    d.batch(0, 2, Split::eval);
  });
}
