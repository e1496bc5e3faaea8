// Chat data with answers worked out by hand: ChatML's and Llama 3's renderings and their answer
// ranges, the templates recognized in a tokenizer_config.json (and one that is not), and a chat
// dataset over a byte-level tokenizer without merges (one token a byte, one per special token), so
// every sequence's tokens, targets and positions are closed-form: first-fit packing, padding,
// cutting, conversations left out, the held-out split and the errors naming the line.
#include "data/chat_dataset.h"
#include "ops/cross_entropy.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tidal {
namespace {

namespace fs = std::filesystem;
using data::ChatMessage;
using data::ChatTemplate;
using data::Role;

TEST(ChatTemplate, ChatMlRendersEachTurnAndTrainsTheAnswerWithItsEnd) {
  const data::RenderedChat r = data::render_chat(
      ChatTemplate::chatml, {{Role::system, "Be brief."}, {Role::user, "2+2?"}, {Role::assistant, " 4 "}});
  const std::string prompt = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
                             "<|im_start|>assistant\n";
  EXPECT_EQ(r.text, prompt + " 4 <|im_end|>\n");  // ChatML keeps the content's white space
  ASSERT_EQ(r.answers.size(), 1u);
  EXPECT_EQ(r.answers[0], std::make_pair(prompt.size(), r.text.size()));
}

TEST(ChatTemplate, Llama3TrimsTheContentAndStartsWithBeginOfText) {
  const data::RenderedChat r = data::render_chat(
      ChatTemplate::llama3,
      {{Role::user, " hi\n"}, {Role::assistant, "\nhello "}, {Role::user, "bye"}, {Role::assistant, "ciao"}});
  const std::string first = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\n";
  const std::string second = "<|start_header_id|>user<|end_header_id|>\n\nbye<|eot_id|>"
                             "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(r.text, first + "hello<|eot_id|>" + second + "ciao<|eot_id|>");
  ASSERT_EQ(r.answers.size(), 2u);
  const std::size_t end1 = first.size() + std::string("hello<|eot_id|>").size();
  EXPECT_EQ(r.answers[0], std::make_pair(first.size(), end1));
  EXPECT_EQ(r.answers[1], std::make_pair(end1 + second.size(), r.text.size()));
}

TEST(ChatTemplate, RecognizesTheTemplatesWhateverTheirWhiteSpaceAndNothingElse) {
  const std::string chatml =
      "{% for message in messages %}\n  {{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}\n{% endfor %}\n{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  EXPECT_EQ(data::recognize_chat_template(chatml, "t"), ChatTemplate::chatml);
  const std::string llama3 =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
      "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
      "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
  EXPECT_EQ(data::recognize_chat_template(llama3, "t"), ChatTemplate::llama3);
  // A default system prompt makes another rendering: refused, with the fix.
  try {
    data::recognize_chat_template("{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are "
                                  "helpful.<|im_end|>\\n' }}{% endif %}" + chatml, "dir/tokenizer_config.json");
    FAIL() << "a ChatML variant with a default system prompt was taken for ChatML";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dir/tokenizer_config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("data.chat_template = \"chatml\""), std::string::npos) << e.what();
  }
}

// One token a byte (id = byte), the special tokens after them: ids 256 ... 261.
const std::vector<std::string> kSpecial = {"<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
                                           "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
constexpr std::int32_t kImStart = 256, kImEnd = 257;

class ChatData : public ::testing::Test {
 protected:
  ChatData() : dir_(fs::temp_directory_path() / ("chat-data-" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
    nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
    for (unsigned b = 0; b < 256; ++b) vocab[data::byte_level_spelling(static_cast<unsigned char>(b))] = b;
    for (std::size_t i = 0; i < kSpecial.size(); ++i)
      added.push_back({{"id", 256 + i}, {"content", kSpecial[i]}, {"special", true}, {"normalized", false}});
    const nlohmann::json tokenizer{
        {"added_tokens", added},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
    std::ofstream(dir_ / "tokenizer.json") << tokenizer.dump();
  }
  ~ChatData() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  data::ChatDataset open(const std::string& lines, std::int64_t seq_len, bool hold_out = false) const {
    return data::ChatDataset(write("chats.jsonl", lines), "data.path",
                             {.tokenizer = (dir_ / "tokenizer.json").string(), .chat_template = ChatTemplate::chatml},
                             hold_out, seq_len, 300, 1);
  }
  std::string error_of(const std::string& lines) const {
    try {
      open(lines, 63);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

// {"user": u, "assistant": a} in ChatML: 1 + 5 + |u| + 1 + 1 + 1 + 10 + |a| + 1 + 1 tokens, of which
// the last |a| + 2 are the answer.
std::string exchange(const std::string& u, const std::string& a) {
  return nlohmann::json{{"messages",
                         {{{"role", "user"}, {"content", u}}, {{"role", "assistant"}, {"content", a}}}}}
             .dump() +
         "\n";
}

TEST_F(ChatData, PacksConversationsFirstFitAndTrainsTheAnswersAlone) {
  // Lengths 30, 40, 25, 31 in sequences of 64: [30, 25] (the third fits beside the first), [40]
  // and [31] (beside neither).
  const std::string a = exchange(std::string(5, 'u'), std::string(4, 'a'));    // 30
  const std::string b = exchange(std::string(10, 'v'), std::string(9, 'b'));   // 40
  const std::string c = exchange("w", std::string(3, 'c'));                    // 25
  const std::string d = exchange(std::string(6, 'x'), std::string(4, 'd'));    // 31
  const data::ChatDataset ds = open(a + b + "\n" + c + d, 63);
  ASSERT_EQ(ds.sequences(), 3);
  const data::TokenSample s0 = ds.sequence_at(0);
  ASSERT_EQ(s0.tokens.size(), 64u);
  EXPECT_EQ(s0.document_starts, (std::vector<std::int64_t>{30, 55}));  // a, c, then 9 tokens of padding
  EXPECT_EQ(s0.tokens[0], kImStart);
  EXPECT_EQ(s0.tokens[30], kImStart);
  for (std::size_t t = 55; t < 64; ++t) EXPECT_EQ(s0.tokens[t], kImEnd) << t;
  // Trained: a's answer "aaaa<|im_end|>\n" (tokens 24..29), c's "ccc<|im_end|>\n" (30 + 20 .. 30 + 24).
  std::vector<std::uint8_t> trained(64, 0);
  for (int t = 24; t < 30; ++t) trained[std::size_t(t)] = 1;
  for (int t = 50; t < 55; ++t) trained[std::size_t(t)] = 1;
  EXPECT_EQ(s0.trained, trained);
  EXPECT_EQ(ds.sequence_at(1).document_starts, (std::vector<std::int64_t>{40}));
  EXPECT_EQ(ds.sequence_at(2).document_starts, (std::vector<std::int64_t>{31}));

  // As a batch: a target where the next token is trained, positions restarting at each document.
  nn::Batch batch = ds.batch(0, 3, data::Split::eval);  // the eval split: every sequence, in order
  const std::int32_t* tgt = batch.targets.data<std::int32_t>();
  const std::int32_t* pos = batch.positions.data<std::int32_t>();
  for (std::int64_t t = 0; t < 63; ++t) {
    const bool kept = trained[std::size_t(t + 1)] != 0;
    EXPECT_EQ(tgt[t], kept ? s0.tokens[std::size_t(t + 1)] : ops::kIgnoreIndex) << t;
    EXPECT_EQ(pos[t], t < 30 ? t : t < 55 ? t - 30 : t - 55) << t;
  }
  EXPECT_EQ(tgt[23], 'a');  // "assistant\n" predicts the answer's first token
  EXPECT_EQ(tgt[29], ops::kIgnoreIndex);  // a's last token does not predict c's first
}

TEST_F(ChatData, CutsLongConversationsLeavesOutUnansweredOnesAndHoldsOutTheLast) {
  const std::string unanswered =
      nlohmann::json{{"messages", {{{"role", "user"}, {"content", "no answer"}}}}}.dump() + "\n";
  const std::string long_prompt = exchange(std::string(60, 'p'), "zz");  // 83: cut, the answer beyond it
  const std::string cut = exchange(std::string(20, 'q'), std::string(30, 'r'));  // 71: cut to 64
  std::string lines = unanswered + long_prompt + cut;
  for (int i = 0; i < 3; ++i) lines += exchange("hi", std::string(std::size_t(40 + i), 'y'));  // 63, 64, 65->64
  const data::ChatDataset ds = open(lines, 63, /*hold_out=*/true);
  EXPECT_EQ(ds.sequences(), 4);  // cut, 63, 64, 64: the first two left out
  const data::TokenSample s = ds.sequence_at(0);
  EXPECT_TRUE(s.document_starts.empty());
  EXPECT_EQ(std::count(s.trained.begin(), s.trained.end(), 1), 64 - (1 + 5 + 20 + 3 + 10));  // the cut answer
  const std::string described = ds.describe();
  EXPECT_NE(described.find("6 conversations"), std::string::npos) << described;
  EXPECT_NE(described.find("3 training and 1 eval sequences"), std::string::npos) << described;
  EXPECT_NE(described.find("3 longer than a sequence"), std::string::npos) << described;
  EXPECT_NE(described.find("2 left out"), std::string::npos) << described;
  // The held-out sequence is the last; training reads the others, each once an epoch.
  EXPECT_EQ(ds.batch(0, 1, data::Split::eval).tokens.data<std::int32_t>()[62], 'y');
  std::vector<std::int64_t> ids = ds.sample_ids(0, 3);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::int64_t>{0, 1, 2}));
}

TEST_F(ChatData, ErrorsNameTheLineAndTheFix) {
  const std::string good = exchange("a", "b");
  EXPECT_NE(error_of(good + "{\"messages\": [}\n").find("line 2 is not JSON"), std::string::npos);
  EXPECT_NE(error_of(good + "\n{\"turns\": []}\n").find("line 3 has no \"messages\" list"), std::string::npos);
  EXPECT_NE(error_of("{\"messages\": [{\"role\": \"user\"}]}\n").find("line 1, message 0 needs \"role\" and "
                                                                        "\"content\""),
            std::string::npos);
  EXPECT_NE(error_of("{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}\n").find("role \"bot\""),
            std::string::npos);
  EXPECT_NE(error_of("{\"messages\": [{\"role\": \"user\", \"content\": 3}]}\n").find("must be a string"),
            std::string::npos);
  EXPECT_NE(error_of("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n").find("packs into 0 sequences"),
            std::string::npos);
  try {  // the tokenizer directory has no tokenizer_config.json to name the template
    data::ChatDataset(write("c.jsonl", good), "data.path", {.tokenizer = (dir_ / "tokenizer.json").string(), .chat_template = std::nullopt},
                      false,
                      63, 300, 1);
    FAIL() << "no template found, and no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.chat_template"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tidal
