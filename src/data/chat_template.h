// Conversations rendered as a chat model reads them: ChatML (<|im_start|>role\ncontent<|im_end|>\n,
// Qwen's and many others') and Llama 3's (<|begin_of_text|>, then <|start_header_id|>role
// <|end_header_id|>\n\n, the content trimmed, <|eot_id|>), exactly as transformers'
// apply_chat_template renders their Jinja templates. The answers are the byte ranges a model is
// trained on: each assistant message's content and what ends its turn, i.e. what the template adds
// after the generation prompt (apply_chat_template(messages[:i], add_generation_prompt=True) is a
// prefix of apply_chat_template(messages[:i + 1]); the rest is the answer).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tidal::data {

enum class ChatTemplate { chatml, llama3 };

enum class Role { system, user, assistant };

struct ChatMessage {
  Role role;
  std::string content;
};

struct RenderedChat {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> answers;  // [begin, end) byte ranges of text, ascending
};

RenderedChat render_chat(ChatTemplate chat_template, const std::vector<ChatMessage>& messages);

// The special tokens a template's text holds: what the tokenizer must have as added tokens.
std::vector<std::string_view> chat_special_tokens(ChatTemplate chat_template);
// The token that ends a turn (<|im_end|>, <|eot_id|>).
std::string_view chat_end_of_turn(ChatTemplate chat_template);

// Which of the built-in templates a tokenizer_config.json's "chat_template" is (compared without
// white space), or a tidal::Error saying it is none of them and how to choose one. `source` names
// the file in errors.
ChatTemplate recognize_chat_template(const std::string& jinja, const std::string& source);

}  // namespace tidal::data
