// The byte-level BPE tokenizer on a hand-written tokenizer.json whose answers are worked out by
// hand: merges by rank (leftmost first among equals), GPT-2's pre-tokenizer cuts (contractions,
// `\s+(?!\S)`, Unicode white space and letters), added tokens, decode, the errors' messages; and
// tokenize_corpus: document separators, --lines, token width, and an output that does not depend
// on threads or on where long documents are cut.
#include "data/bpe_tokenizer.h"
#include "data/token_shards.h"
#include "data/tokenize_corpus.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace tidal {
namespace {

using Ids = std::vector<std::uint32_t>;
namespace fs = std::filesystem;

// Merges in rank order, in tokenizer.json's spelling (Ġ is a space, ĉ a tab, Ċ a newline).
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"Ġ", "t"},   {"h", "e"},  {"Ġt", "he"}, {"i", "n"},  {"n", "g"}, {"in", "g"}, {"a", "a"},
    {"aa", "aa"}, {"Ġ", "Ġ"},  {"Ġ", "b"},   {"ĉ", "ĉ"},  {"Ġ", "Ċ"}, {"'", "t"},  {"'", "M"},
    {"'", "l"},   {"'l", "l"}, {"Ã", "©"},   {"Ġ", "Ã©"}, {"Ġ", "4"}, {"Ċ", "Ċ"}};

class BpeTokenizer : public ::testing::Test {
 protected:
  ~BpeTokenizer() override { fs::remove_all(dir_); }

  static fs::path make_dir() {
    const fs::path dir = fs::temp_directory_path() / ("bpe-tokenizer-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir;
  }

  // The tokenizer.json: the 256 byte tokens (id = byte), the merges' tokens, then <|endoftext|>.
  static nlohmann::json tiny_json() {
    nlohmann::json vocab = nlohmann::json::object(), merges = nlohmann::json::array();
    for (unsigned b = 0; b < 256; ++b) vocab[data::byte_level_spelling(static_cast<unsigned char>(b))] = b;
    for (const auto& [l, r] : kMerges) {
      if (!vocab.contains(l + r)) vocab[l + r] = vocab.size();
      merges.push_back(l + " " + r);
    }
    const std::size_t eot = vocab.size();
    vocab["<|endoftext|>"] = eot;
    return {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens",
         {{{"id", eot},
           {"content", "<|endoftext|>"},
           {"single_word", false},
           {"lstrip", false},
           {"rstrip", false},
           {"normalized", false},
           {"special", true}}}},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
        {"post_processor",
         {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"vocab", vocab},
          {"merges", merges}}}};
  }

  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  data::BpeTokenizer load(const nlohmann::json& j, const std::string& name = "tokenizer.json") const {
    return data::BpeTokenizer::from_file(write(name, j.dump()));
  }
  // The error message of loading `j` ("" if it loads).
  std::string load_error(const nlohmann::json& j, const std::string& name) const {
    try {
      load(j, name);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  // Ids by tokenizer.json spelling.
  Ids ids(std::initializer_list<const char*> tokens) const {
    Ids out;
    for (const char* t : tokens) out.push_back(*tok_.token_id(t));
    return out;
  }

  const fs::path dir_ = make_dir();  // made before tok_ is written there
  data::BpeTokenizer tok_ = load(tiny_json());
};

TEST_F(BpeTokenizer, MergesApplyByRankLowestFirst) {
  EXPECT_EQ(tok_.encode(" the"), ids({"Ġthe"}));  // Ġ t (0), h e (1), then Ġt he (2)
  EXPECT_EQ(tok_.encode("the"), ids({"t", "he"}));
  // i n (3) before n g (4): "in" + "g" -> "ing"; the other order would leave "i" "ng" (no such merge).
  EXPECT_EQ(tok_.encode("ing"), ids({"ing"}));
  EXPECT_EQ(tok_.encode("ng"), ids({"ng"}));
  EXPECT_EQ(tok_.encode("xyz"), ids({"x", "y", "z"}));
  EXPECT_TRUE(tok_.encode("").empty());
}

TEST_F(BpeTokenizer, EqualPairsMergeLeftmostFirst) {
  EXPECT_EQ(tok_.encode("aaa"), ids({"aa", "a"}));
  EXPECT_EQ(tok_.encode("aaaaa"), ids({"aaaa", "a"}));
  // One 301-byte piece: 75 x "aaaa" and an "a" (the heap of candidate pairs on a long word).
  Ids want(75, *tok_.token_id("aaaa"));
  want.push_back(*tok_.token_id("a"));
  EXPECT_EQ(tok_.encode(std::string(301, 'a')), want);
}

TEST_F(BpeTokenizer, ContractionsAreCaseSensitivePieces) {
  EXPECT_EQ(tok_.encode("don't"), ids({"d", "o", "n", "'t"}));
  EXPECT_EQ(tok_.encode("I'M"), ids({"I", "'", "M"}));  // 'M is no contraction: "'" and "M" are two pieces
  EXPECT_EQ(tok_.encode("they'll"), ids({"t", "he", "y", "'ll"}));
  EXPECT_EQ(tok_.encode(" 't"), ids({"Ġ", "'", "t"}));  // " '" is one piece, "t" the next
}

TEST_F(BpeTokenizer, WhiteSpaceRunsLeaveTheirLastSpaceToTheNextPiece) {
  EXPECT_EQ(tok_.encode("a  b"), ids({"a", "Ġ", "Ġb"}));
  EXPECT_EQ(tok_.encode("a   b"), ids({"a", "ĠĠ", "Ġb"}));
  EXPECT_EQ(tok_.encode("a  "), ids({"a", "ĠĠ"}));  // at the end the run is whole
  EXPECT_EQ(tok_.encode("a "), ids({"a", "Ġ"}));
  EXPECT_EQ(tok_.encode("  "), ids({"ĠĠ"}));
  EXPECT_EQ(tok_.encode("a\t\tb"), ids({"a", "ĉ", "ĉ", "b"}));  // a tab never prefixes: three pieces
  EXPECT_EQ(tok_.encode("a \n b"), ids({"a", "ĠĊ", "Ġb"}));
  EXPECT_EQ(tok_.encode("a\n\n"), ids({"a", "ĊĊ"}));
  EXPECT_EQ(tok_.encode("a\n\nb"), ids({"a", "Ċ", "Ċ", "b"}));
  EXPECT_EQ(tok_.encode("a\r\nb"), ids({"a", "č", "Ċ", "b"}));
  // U+00A0 (bytes C2 A0: "Âł") is white space but no ' ': it prefixes nothing.
  EXPECT_EQ(tok_.encode("x\u00a0\u00a0y"), ids({"x", "Â", "ł", "Â", "ł", "y"}));
  EXPECT_EQ(tok_.encode(" \u3000x"), ids({"Ġ", "ã", "Ģ", "Ģ", "x"}));
}

TEST_F(BpeTokenizer, UnicodeLettersAndNumbersTakeTheSpaceBeforeThem) {
  EXPECT_EQ(tok_.encode(" \u00e9"), ids({"ĠÃ©"}));                  // é is a letter: " é" is one piece
  EXPECT_EQ(tok_.encode("caf\u00e9"), ids({"c", "a", "f", "Ã©"}));  // é: bytes C3 A9 merged
  EXPECT_EQ(tok_.encode(" 4"), ids({"Ġ4"}));
  EXPECT_EQ(tok_.encode("x4"), ids({"x", "4"}));
  EXPECT_EQ(tok_.encode("!\u00e9"), ids({"!", "Ã©"}));  // punctuation and letters are separate pieces
}

TEST_F(BpeTokenizer, AddedTokensAreSplitOutFirst) {
  const std::uint32_t eot = *tok_.eot_id();
  EXPECT_EQ(tok_.encode("a<|endoftext|> the"), (Ids{*tok_.token_id("a"), eot, *tok_.token_id("Ġthe")}));
  EXPECT_EQ(tok_.encode("<|endoftext|><|endoftext|>"), (Ids{eot, eot}));
  const Ids partial = tok_.encode("<|endoftext|");  // no added token: "<|", "endoftext", "|" as bytes
  EXPECT_EQ(partial.size(), 12u);
  EXPECT_EQ(std::count(partial.begin(), partial.end(), eot), 0);
}

TEST_F(BpeTokenizer, AddedTokensMatchLeftmostLongestAndStrip) {
  nlohmann::json j = tiny_json();
  auto add = [&](const char* content, bool lstrip, bool rstrip) {
    j["added_tokens"].push_back({{"id", 0},
                                 {"content", content},
                                 {"single_word", false},
                                 {"lstrip", lstrip},
                                 {"rstrip", rstrip},
                                 {"normalized", false},
                                 {"special", true}});
  };
  add("<x>", true, false);
  add("ing", false, false);
  add("<x><y>", false, true);
  const data::BpeTokenizer t = load(j, "added.json");
  // `tokenizers` numbers added tokens outside the vocabulary from its size on, whatever "id" says;
  // one in the vocabulary keeps its id there.
  const std::uint32_t x = *t.token_id("<x>"), xy = *t.token_id("<x><y>"), n = *t.eot_id() + 1;
  EXPECT_EQ(x, n);
  EXPECT_EQ(xy, n + 1);
  EXPECT_EQ(t.vocab_size(), n + 2);
  EXPECT_EQ(*t.token_id("ing"), *tok_.token_id("ing"));
  EXPECT_EQ(t.encode("thing<x>"), (Ids{*t.token_id("t"), *t.token_id("h"), *t.token_id("ing"), x}));
  const std::uint32_t a = *t.token_id("a"), b = *t.token_id("b");
  EXPECT_EQ(t.encode("a<x><y>b"), (Ids{a, xy, b}));     // the longest at the leftmost place
  EXPECT_EQ(t.encode("a  <x>b"), (Ids{a, x, b}));       // lstrip takes "  " along
  EXPECT_EQ(t.encode("a<x><y>  b"), (Ids{a, xy, b}));   // rstrip too
  EXPECT_EQ(t.encode("<x><y> <x>b"), (Ids{xy, x, b}));  // not past the previous match
}

TEST_F(BpeTokenizer, DecodeGivesTheBytesBack) {
  const std::string text = "Hello, w\u00f6rld! \U0001F44D\U0001F3FD don't\r\n\t <|endoftext|> \u4e2d\u6587  x  ";
  const Ids ids = tok_.encode(text);
  EXPECT_EQ(tok_.decode(ids), text);
  EXPECT_EQ(tok_.decode(Ids{*tok_.eot_id()}), "<|endoftext|>");
  EXPECT_THROW(tok_.decode(Ids{tok_.vocab_size()}), Error);
}

TEST_F(BpeTokenizer, VocabularyQueries) {
  EXPECT_EQ(tok_.vocab_size(), 256 + 20 + 1);  // the bytes, a token per merge, <|endoftext|>
  EXPECT_EQ(*tok_.eot_id(), tok_.vocab_size() - 1);
  EXPECT_EQ(*tok_.token_id("a"), std::uint32_t('a'));
  EXPECT_FALSE(tok_.token_id("nope").has_value());
}

TEST_F(BpeTokenizer, MergesAsPairsReadAsStrings) {
  nlohmann::json j = tiny_json();
  for (auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    m = nlohmann::json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  const data::BpeTokenizer pairs = load(j, "pairs.json");
  for (const char* text : {" the thing", "aaaaa don't", "a \n b  "}) EXPECT_EQ(pairs.encode(text), tok_.encode(text));
}

TEST_F(BpeTokenizer, ByteLevelInsideASequenceReadsAsAlone) {
  nlohmann::json j = tiny_json();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {tiny_json()["pre_tokenizer"]}}};
  const data::BpeTokenizer seq = load(j, "sequence.json");
  for (const char* text : {" the thing", "a  b\n\n"}) EXPECT_EQ(seq.encode(text), tok_.encode(text));
}

TEST_F(BpeTokenizer, TextThatIsNotUtf8IsRefusedWithItsOffset) {
  for (const auto& [text, offset] : std::vector<std::pair<std::string, std::size_t>>{{"ab\xff", 2},
                                                                                     {"abcdefghij\xc0\xaf", 10},
                                                                                     {"x\xed\xa0\x80", 1},
                                                                                     {"\xe4\xb8", 0},
                                                                                     {"ok \xf4\x90\x80\x80", 3}}) {
    try {
      tok_.encode(text);
      ADD_FAILURE() << "no error for " << testing::PrintToString(text);
    } catch (const data::InvalidUtf8& e) {
      EXPECT_EQ(e.offset(), offset) << testing::PrintToString(text);
    }
  }
}

TEST_F(BpeTokenizer, UnsupportedFilesAreErrorsNamingTheFileAndKey) {
  const std::string dir = dir_.string();
  nlohmann::json j = tiny_json();
  j["model"]["type"] = "WordPiece";
  EXPECT_EQ(load_error(j, "wp.json"), "tokenizer.json '" + dir +
                                          "/wp.json': model.type is \"WordPiece\"; tidal "
                                          "tokenize reads byte-level BPE (GPT-2 style) only");
  j = tiny_json();
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_NE(load_error(j, "nfc.json").find("nfc.json': normalizer is \"NFC\""), std::string::npos);
  j = tiny_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_NE(load_error(j, "ws.json").find("ws.json': pre_tokenizer.type is \"Whitespace\""), std::string::npos);
  j = tiny_json();
  j["model"]["merges"][0] = "Ġ zzz";
  EXPECT_NE(load_error(j, "merge.json").find("merge.json': model.merges[0] \"Ġ zzz\" names a token that is not in"),
            std::string::npos);
  j = tiny_json();
  j["model"]["dropout"] = 0.1;
  EXPECT_NE(load_error(j, "dropout.json").find("model.dropout is 0.1"), std::string::npos);
  j = tiny_json();
  j["post_processor"] = {{"type", "TemplateProcessing"}};
  EXPECT_NE(load_error(j, "tp.json").find("post_processor.type is \"TemplateProcessing\""), std::string::npos);
  j = tiny_json();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {tiny_json()["pre_tokenizer"], {{"type", "Digits"}}}}};
  EXPECT_NE(load_error(j, "seq.json").find("pre_tokenizer is a Sequence of 2 pre-tokenizers"), std::string::npos);
  j = tiny_json();
  j["model"]["vocab"]["7"] = 666666655;  // one id far past the rest (a fuzzer's 21 GiB table)
  EXPECT_NE(load_error(j, "sparse.json").find("sparse.json': model.vocab's ids run to 666666655 for"),
            std::string::npos);
  j = tiny_json();
  j["model"]["type"] = 5;
  EXPECT_NE(load_error(j, "type.json").find("type.json' is not laid out as a Hugging Face tokenizer.json"),
            std::string::npos);

  const std::string text = tiny_json().dump();
  const std::string cut = write("cut.json", text.substr(0, text.size() / 2));
  try {
    data::BpeTokenizer::from_file(cut);
    ADD_FAILURE() << "a truncated tokenizer.json loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json '" + cut + "' is not valid JSON"), std::string::npos)
        << e.what();
  }
  try {
    data::BpeTokenizer::from_file(dir + "/missing.json");
    ADD_FAILURE() << "a missing tokenizer.json loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open tokenizer.json '" + dir + "/missing.json'"), std::string::npos);
  }
}

TEST_F(BpeTokenizer, SplitPointsAreNewlinesBesidePrintableCharacters) {
  EXPECT_EQ(tok_.split_point("ab\ncd", 1), 2u);        // after "b"
  EXPECT_EQ(tok_.split_point("ab\n\ncd", 3), 3u);      // before "c"
  EXPECT_EQ(tok_.split_point("a \n \nb c", 1), 4u);    // the first '\n' has white space on both sides
  EXPECT_EQ(tok_.split_point("a \n b", 1), std::string_view::npos);
  EXPECT_EQ(tok_.split_point("ab\ncd", 3), std::string_view::npos);
  // Before "<", where an added token may start, the run " \n" ends its stretch: one piece.
  EXPECT_EQ(tok_.split_point("a \n<|endoftext|>", 1), std::string_view::npos);
  nlohmann::json j = tiny_json();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(load(j, "prefix.json").split_point("ab\ncd", 1), std::string_view::npos);  // "cd" would become " cd"
  j = tiny_json();
  j["added_tokens"][0]["rstrip"] = true;  // "<|endoftext|>\nx" is one match and "x"
  EXPECT_EQ(load(j, "rstrip.json").split_point("ab\ncd", 1), std::string_view::npos);
}

// ---- tokenize_corpus ----

std::pair<int, Ids> read_shard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::int32_t header[256];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], data::kTokenFileMagic);
  Ids ids(static_cast<std::size_t>(header[2]));
  for (auto& id : ids) {
    if (header[1] == 1) {
      std::uint16_t v;
      in.read(reinterpret_cast<char*>(&v), 2);
      id = v;
    } else {
      in.read(reinterpret_cast<char*>(&id), 4);
    }
  }
  return {header[1], ids};
}

TEST_F(BpeTokenizer, CorpusSeparatesDocumentsAndSkipsEmptyOnes) {
  data::TokenizeOptions o;
  o.inputs = {write("a.txt", " the"), write("empty.txt", ""), write("b.txt", "ing\n")};
  o.output = (dir_ / "out.bin").string();
  o.eot_id = data::document_separator(tok_, "tokenizer.json", "");
  const data::TokenizeReport r = data::tokenize_corpus(tok_, o);
  EXPECT_EQ(r.files, 3u);
  EXPECT_EQ(r.documents, 2u);
  EXPECT_EQ(r.bytes, 8u);
  EXPECT_FALSE(r.wide);
  const auto [version, got] = read_shard(o.output);
  EXPECT_EQ(version, 1);
  EXPECT_EQ(got, ids({"Ġthe", "<|endoftext|>", "ing", "Ċ"}));
  EXPECT_EQ(r.tokens, got.size());

  o.inputs = {write("lines.txt", "the\r\n\n aa\nng")};
  o.lines = true;
  EXPECT_EQ(data::tokenize_corpus(tok_, o).documents, 3u);
  EXPECT_EQ(read_shard(o.output).second, ids({"t", "he", "<|endoftext|>", "Ġ", "aa", "<|endoftext|>", "ng"}));
}

TEST_F(BpeTokenizer, CorpusOutputIsTheSameForAnyThreadsAndChunks) {
  // Newlines beside every kind of neighbour: letters, contractions, spaces, tabs, \r, blank lines,
  // an added token.
  const char* lines[] = {"the thing don't\n", "  aaaaa\t\n", "\n", "x \n", " y'\n", "\r\n", "<|endoftext|>\n",
                         "they'll\n\n\n", "\u00e9\n \n", "4\n"};
  std::string long_doc;
  for (int i = 0; i < 400; ++i) long_doc += lines[i % 10] + std::string(std::size_t(i % 3), ' ') + lines[i * 7 % 10];
  data::TokenizeOptions o;
  o.inputs = {write("long.txt", long_doc), write("short.txt", "a  b")};
  o.eot_id = *tok_.eot_id();
  Ids want = tok_.encode(long_doc);
  want.push_back(o.eot_id);
  for (std::uint32_t id : tok_.encode("a  b")) want.push_back(id);
  for (const int threads : {1, 3}) {
    for (const std::size_t chunk : {std::size_t(1) << 20, std::size_t(64), std::size_t(1)}) {
      o.threads = threads;
      o.chunk_bytes = chunk;
      o.output = (dir_ / "chunks.bin").string();
      data::tokenize_corpus(tok_, o);
      EXPECT_EQ(read_shard(o.output).second, want) << threads << " threads, chunks of " << chunk;
    }
  }
}

TEST_F(BpeTokenizer, CorpusTokensAreUint32WhenTheVocabularyNeedsIt) {
  nlohmann::json j = tiny_json();
  j["model"]["vocab"]["zzz"] = 70000;
  const data::BpeTokenizer big = load(j, "big.json");
  data::TokenizeOptions o;
  o.inputs = {write("x.txt", "the")};
  o.output = (dir_ / "wide.bin").string();
  EXPECT_TRUE(data::tokenize_corpus(big, o).wide);
  const auto [version, got] = read_shard(o.output);
  EXPECT_EQ(version, 2);
  EXPECT_EQ(got, ids({"t", "he"}));
}

TEST_F(BpeTokenizer, CorpusErrorsNameTheFile) {
  data::TokenizeOptions o;
  o.output = (dir_ / "out.bin").string();
  o.inputs = {(dir_ / "nope.txt").string()};
  try {
    data::tokenize_corpus(tok_, o);
    ADD_FAILURE() << "a missing input was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read input '" + o.inputs[0] + "'"), std::string::npos) << e.what();
  }
  o.inputs = {write("ok.txt", "fine"), write("latin1.txt", "line one\ncaf\xe9\n")};
  o.lines = true;
  try {
    data::tokenize_corpus(tok_, o);
    ADD_FAILURE() << "latin-1 text was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input '" + o.inputs[1] +
                                         "' is not UTF-8 text (a malformed byte sequence at "
                                         "byte 12)"),
              std::string::npos)
        << e.what();
  }
  nlohmann::json j = tiny_json();
  j["added_tokens"] = nlohmann::json::array();
  j["model"]["vocab"].erase("<|endoftext|>");
  const data::BpeTokenizer no_eot = load(j, "no_eot.json");
  try {
    data::document_separator(no_eot, "no_eot.json", "");
    ADD_FAILURE() << "no error without <|endoftext|>";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'no_eot.json' has no \"<|endoftext|>\" token"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("--eot TOKEN"), std::string::npos);
  }
  EXPECT_EQ(data::document_separator(no_eot, "no_eot.json", "Ġthe"), *tok_.token_id("Ġthe"));
}

}  // namespace
}  // namespace tidal
