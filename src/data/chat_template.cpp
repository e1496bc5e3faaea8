#include "data/chat_template.h"

#include "core/error.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace tidal::data {
namespace {

std::string_view role_name(Role role) {
  return role == Role::system ? "system" : role == Role::user ? "user" : "assistant";
}

// Jinja's `trim` (Python's str.strip()) on ASCII white space.
std::string_view trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The templates as their models' tokenizer_config.json hold them: ChatML as transformers' chat
// template documentation gives it, Llama 3 as Meta-Llama-3-8B-Instruct's.
constexpr std::string_view kChatMlJinja =
    R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
constexpr std::string_view kLlama3Jinja =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})";

std::string without_space(std::string_view s) {
  std::string out;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) out += c;
  return out;
}

}  // namespace

RenderedChat render_chat(ChatTemplate chat_template, const std::vector<ChatMessage>& messages) {
  RenderedChat out;
  if (chat_template == ChatTemplate::llama3) out.text = "<|begin_of_text|>";
  for (const ChatMessage& m : messages) {
    // The generation prompt (the turn's header) is the prompt's; what follows is the answer.
    std::string_view content = m.content;
    if (chat_template == ChatTemplate::chatml) {
      out.text += fmt::format("<|im_start|>{}\n", role_name(m.role));
    } else {
      out.text += fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n", role_name(m.role));
      content = trim(content);
    }
    const std::size_t begin = out.text.size();
    out.text += content;
    out.text += chat_template == ChatTemplate::chatml ? "<|im_end|>\n" : "<|eot_id|>";
    if (m.role == Role::assistant) out.answers.emplace_back(begin, out.text.size());
  }
  return out;
}

std::vector<std::string_view> chat_special_tokens(ChatTemplate chat_template) {
  if (chat_template == ChatTemplate::chatml) return {"<|im_start|>", "<|im_end|>"};
  return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
}

std::string_view chat_end_of_turn(ChatTemplate chat_template) {
  return chat_template == ChatTemplate::chatml ? "<|im_end|>" : "<|eot_id|>";
}

ChatTemplate recognize_chat_template(const std::string& jinja, const std::string& source) {
  const std::string mine = without_space(jinja);
  if (mine == without_space(kChatMlJinja)) return ChatTemplate::chatml;
  if (mine == without_space(kLlama3Jinja)) return ChatTemplate::llama3;
  const bool chatml_like = jinja.find("<|im_start|>") != std::string::npos;
  const bool llama3_like = jinja.find("<|start_header_id|>") != std::string::npos;
  throw Error(fmt::format(
      "{}: its chat_template is not one tidal renders (ChatML as transformers documents it, or Llama 3 Instruct's){}: "
      "set data.chat_template = \"chatml\" or \"llama3\" to render the conversations that way (`tidal data` shows "
      "the result; a template that adds a default system prompt or dates renders differently)",
      source,
      chatml_like   ? " though it uses ChatML's tokens"
      : llama3_like ? " though it uses Llama 3's tokens"
                    : ""));
}

}  // namespace tidal::data
