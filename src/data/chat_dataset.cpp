#include "data/chat_dataset.h"

#include "core/error.h"
#include "data/sample_order.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace tidal::data {
namespace {

using json = nlohmann::json;

constexpr std::size_t kLookBack = 64;  // sequences still open to a conversation that fits

// The template the tokenizer's directory names (tokenizer_config.json's "chat_template").
ChatTemplate template_beside(const std::string& tokenizer) {
  const std::string config = (std::filesystem::path(tokenizer).parent_path() / "tokenizer_config.json").string();
  const char* fix = "set data.chat_template = \"chatml\" or \"llama3\"";
  std::ifstream in(config);
  TIDAL_CHECK(in.good(), "data.kind = \"chat\" renders conversations with a chat template, and data.chat_template is "
              "unset while '{}' (beside data.tokenizer) does not exist: {}", config, fix);
  const json root = json::parse(in, nullptr, false);
  TIDAL_CHECK(!root.is_discarded() && root.is_object(), "'{}' is not a JSON object: {}", config, fix);
  TIDAL_CHECK(root.contains("chat_template") && root["chat_template"].is_string(),
              "'{}' has no chat_template (or several, by name): {}", config, fix);
  return recognize_chat_template(root["chat_template"].get<std::string>(), config);
}

const std::string& existing_file(const std::string& path, const std::string& key) {
  TIDAL_CHECK(std::filesystem::is_regular_file(path), "{} = '{}' does not exist or is not a file", key, path);
  return path;
}

BpeTokenizer chat_tokenizer(const std::string& path) {
  TIDAL_CHECK(!path.empty(),
              "data.kind = \"chat\" needs data.tokenizer (the model's tokenizer.json) to tokenize the conversations");
  return BpeTokenizer::from_file(path);
}

Role role_of(const json& role, const std::string& where) {
  TIDAL_CHECK(role.is_string(), "{}: \"role\" must be a string, got {}", where, role.dump());
  const std::string r = role.get<std::string>();
  if (r == "system") return Role::system;
  if (r == "user") return Role::user;
  TIDAL_CHECK(r == "assistant", "{}: role \"{}\" is none of system, user, assistant (tool calls are not rendered)",
              where, r);
  return Role::assistant;
}

}  // namespace

ChatDataset::ChatDataset(const std::string& path, const std::string& key, const ChatOptions& chat,
                         bool hold_out_eval, std::int64_t seq_len, std::int64_t vocab, std::uint64_t seed)
    : TokenDataset(seq_len, vocab, Objective::causal, seed, Packing{.documents = true}),
      file_(existing_file(path, key)),
      source_(fmt::format("{} '{}'", key, path)),
      tokenizer_(chat_tokenizer(chat.tokenizer)),
      template_(chat.chat_template ? *chat.chat_template : template_beside(chat.tokenizer)),
      held_out_(hold_out_eval) {
  TIDAL_CHECK(tokenizer_.vocab_size() <= std::uint32_t(vocab),
              "data.tokenizer '{}' has {} ids and model.vocab_size is {}: use the model's own tokenizer", chat.tokenizer,
              tokenizer_.vocab_size(), vocab);
  for (std::string_view special : chat_special_tokens(template_)) {
    const std::vector<std::uint32_t> ids = tokenizer_.encode(special);
    TIDAL_CHECK(ids.size() == 1,
                "data.tokenizer '{}' has no added token \"{}\", which the {} chat template needs: use the chat "
                "model's tokenizer, or the template it was trained with (data.chat_template)",
                chat.tokenizer, special, template_ == ChatTemplate::chatml ? "ChatML" : "Llama 3");
  }
  padding_id_ = std::int32_t(tokenizer_.encode(chat_end_of_turn(template_)).front());

  // Every line once: checked, tokenized, and packed whole into the first of the last kLookBack
  // sequences with room for it, else a new one (first fit, bounded: near file order, little padding).
  const std::int64_t length = seq_len + 1;
  const char* text = reinterpret_cast<const char*>(file_.data());
  struct Open {
    std::int64_t sequence, used;
  };
  std::vector<Open> open;
  std::vector<std::pair<std::int64_t, Line>> placed;  // (sequence, conversation)
  std::int64_t packed = 0;
  std::uint32_t number = 0;
  for (std::uint64_t at = 0; at < file_.size();) {
    const void* newline = std::memchr(text + at, '\n', file_.size() - at);
    const std::uint64_t end = newline ? std::uint64_t(static_cast<const char*>(newline) - text) : file_.size();
    TIDAL_CHECK(end - at < (std::uint64_t(1) << 32), "{} line {} is longer than 4 GiB", source_, number + 1);
    const Line line{at, std::uint32_t(end - at), ++number};
    at = end + 1;
    if (std::string_view(text + line.begin, line.bytes).find_first_not_of(" \t\r") == std::string_view::npos) continue;
    ++conversations_;
    const Encoded e = encode(line);
    const std::int64_t n = std::min<std::int64_t>(std::int64_t(e.tokens.size()), length);
    truncated_ += std::int64_t(e.tokens.size()) > length;
    const std::int64_t answered = std::count(e.trained.begin(), e.trained.begin() + n, 1);
    if (answered == 0) continue;  // nothing to train within a sequence
    answered_tokens_ += answered;
    packed_tokens_ += n;
    auto room = std::find_if(open.begin(), open.end(), [&](const Open& o) { return o.used + n <= length; });
    if (room == open.end()) {
      if (open.size() == kLookBack) open.erase(open.begin());
      open.push_back({packed++, 0});
      room = open.end() - 1;
    }
    room->used += n;
    placed.emplace_back(room->sequence, line);
    if (room->used == length) open.erase(room);
  }
  std::stable_sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t c = 0; c < placed.size(); ++c) {
    if (c == 0 || placed[c].first != placed[c - 1].first) first_.push_back(std::int64_t(c));
    kept_.push_back(placed[c].second);
  }
  first_.push_back(std::int64_t(kept_.size()));
  TIDAL_CHECK(packed >= (hold_out_eval ? 2 : 1),
              "{} packs into {} sequences of model.seq_len + 1 = {} tokens ({} conversations, {} with an assistant "
              "answer): {} needs at least {}",
              source_, packed, length, conversations_, kept_.size(), key, hold_out_eval ? "two (one held out)" : "one");
  if (hold_out_eval) {
    eval_sequences_ = std::max<std::int64_t>(1, packed / 20);
    train_sequences_ = packed - eval_sequences_;
    eval_first_ = train_sequences_;
  } else {
    train_sequences_ = eval_sequences_ = packed;
  }
}

std::vector<ChatMessage> ChatDataset::parse(const Line& line) const {
  const std::string where = fmt::format("{} line {}", source_, line.number);
  const json row = json::parse(std::string_view(reinterpret_cast<const char*>(file_.data()) + line.begin, line.bytes),
                               nullptr, false);
  TIDAL_CHECK(!row.is_discarded(), "{} is not JSON: each line is one conversation, {{\"messages\": [{{\"role\": "
              "\"user\", \"content\": \"...\"}}, ...]}}", where);
  TIDAL_CHECK(row.is_object() && row.contains("messages") && row["messages"].is_array(),
              "{} has no \"messages\" list: each line is one conversation, {{\"messages\": [{{\"role\": \"user\", "
              "\"content\": \"...\"}}, ...]}}", where);
  std::vector<ChatMessage> messages;
  for (std::size_t i = 0; i < row["messages"].size(); ++i) {
    const json& m = row["messages"][i];
    const std::string at = fmt::format("{}, message {}", where, i);
    TIDAL_CHECK(m.is_object() && m.contains("role") && m.contains("content"),
                "{} needs \"role\" and \"content\", got {}", at, m.dump());
    TIDAL_CHECK(m["content"].is_string(), "{}: \"content\" must be a string, got {}", at, m["content"].dump());
    messages.push_back({role_of(m["role"], at), m["content"].get<std::string>()});
  }
  return messages;
}

ChatDataset::Encoded ChatDataset::encode(const Line& line) const {
  const RenderedChat chat = render_chat(template_, parse(line));
  Encoded e;
  std::vector<std::uint32_t> ids;
  try {
    ids = tokenizer_.encode(chat.text);
  } catch (const InvalidUtf8& bad) {
    throw Error(fmt::format("{} line {}: a message is not UTF-8 (rendered byte {})", source_, line.number,
                            bad.offset()));
  }
  // Each token's first byte in the text: inside an answer or not.
  std::size_t offset = 0, answer = 0;
  for (const std::uint32_t id : ids) {
    while (answer < chat.answers.size() && chat.answers[answer].second <= offset) ++answer;
    e.tokens.push_back(std::int32_t(id));
    e.trained.push_back(answer < chat.answers.size() && chat.answers[answer].first <= offset);
    offset += tokenizer_.bytes_of(id).size();
  }
  TIDAL_CHECK(offset == chat.text.size(),
              "{} line {}: the tokens of the rendered conversation do not spell its {} bytes (an added token of the "
              "tokenizer strips white space), so the answers cannot be found among them",
              source_, line.number, chat.text.size());
  return e;
}

TokenSample ChatDataset::sequence_at(std::int64_t s) const {
  TIDAL_ASSERT(s >= 0 && s < sequences(), "sequence {} of {}", s, sequences());
  const std::size_t length = std::size_t(seq_len_ + 1);
  TokenSample out;
  out.tokens.reserve(length);
  out.trained.reserve(length);
  for (std::int64_t c = first_[std::size_t(s)]; c < first_[std::size_t(s + 1)]; ++c) {
    Encoded e = encode(kept_[std::size_t(c)]);
    const std::size_t n = std::min(e.tokens.size(), length);
    if (!out.tokens.empty()) out.document_starts.push_back(std::int64_t(out.tokens.size()));
    out.tokens.insert(out.tokens.end(), e.tokens.begin(), e.tokens.begin() + std::ptrdiff_t(n));
    out.trained.insert(out.trained.end(), e.trained.begin(), e.trained.begin() + std::ptrdiff_t(n));
  }
  const Line& first = kept_[std::size_t(first_[std::size_t(s)])];
  const Line& last = kept_[std::size_t(first_[std::size_t(s + 1)] - 1)];
  file_.release(first.begin, last.begin + last.bytes - first.begin);
  if (out.tokens.size() < length) {  // padding, a document of its own that trains nothing
    out.document_starts.push_back(std::int64_t(out.tokens.size()));
    out.tokens.resize(length, padding_id_);
    out.trained.resize(length, 0);
  }
  return out;
}

std::int64_t ChatDataset::sequence(std::int64_t index, Split split) const {
  return split == Split::train ? training_sample(index, train_sequences_, seed_) : eval_first_ + index % eval_sequences_;
}

TokenSample ChatDataset::sample(std::int64_t index, Split split) const { return sequence_at(sequence(index, split)); }

std::vector<std::int64_t> ChatDataset::sample_ids(std::int64_t first, std::int64_t count) const {
  std::vector<std::int64_t> out;
  for (std::int64_t i = first; i < first + count; ++i) out.push_back(sequence(i, Split::train));
  return out;
}

std::string ChatDataset::describe() const {
  const double positions = double(sequences() * (seq_len_ + 1));
  std::string split = held_out_ ? fmt::format("{} training and {} eval sequences", train_sequences_, eval_sequences_)
                                : fmt::format("{} sequences", train_sequences_);
  std::string out = fmt::format(
      "{}: {} conversations rendered as {}, packed into {} of {} tokens; {:.1f}% of the tokens are answers "
      "(trained), {:.1f}% padding",
      source_, conversations_, template_ == ChatTemplate::chatml ? "ChatML" : "Llama 3", split, seq_len_ + 1,
      100.0 * double(answered_tokens_) / positions, 100.0 * (1.0 - double(packed_tokens_) / positions));
  if (truncated_) out += fmt::format("; {} longer than a sequence, cut to its length", truncated_);
  if (std::int64_t(kept_.size()) < conversations_)
    out += fmt::format("; {} left out, with no answer within a sequence", conversations_ - std::int64_t(kept_.size()));
  return out;
}

}  // namespace tidal::data
