#include "tokenizer/chat_template.h"

namespace ds {
namespace {

const char* const k_choose_hint = " (choose one with --chat-template deepseek-r1|chatml|llama3)";

Status check_roles(const std::vector<ChatMessage>& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return Status::error("chat: message " + std::to_string(i) + " has role '" + role +
                           "' (expected system, user or assistant)");
    }
  }
  return Status();
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return {};
  const size_t end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

// DeepSeek-R1: the system prompt is hoisted to the front; an assistant turn
// keeps only what follows its reasoning.
std::string render_deepseek(const std::vector<ChatMessage>& messages, bool add_generation_prompt, const std::string& bos) {
  std::string system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") system = m.content;
  }
  std::string out = bos + system;
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      out += "<｜User｜>" + m.content;
    } else if (m.role == "assistant") {
      std::string content = m.content;
      const size_t think_end = content.rfind("</think>");
      if (think_end != std::string::npos) content = content.substr(think_end + 8);
      out += "<｜Assistant｜>" + content + "<｜end▁of▁sentence｜>";
    }
  }
  if (add_generation_prompt) out += "<｜Assistant｜><think>\n";
  return out;
}

std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  if (messages.empty() || messages[0].role != "system") {
    out += "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_llama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt, const std::string& bos) {
  std::string out = bos + "<|start_header_id|>system<|end_header_id|>\n\n";
  out += "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    out += trim(messages[0].content);
    first = 1;
  }
  out += "<|eot_id|>";
  for (size_t i = first; i < messages.size(); ++i) {
    out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" + trim(messages[i].content) + "<|eot_id|>";
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

}  // namespace

Result<ChatFormat> chat_format_from_name(const std::string& name) {
  if (name == "deepseek-r1" || name == "deepseek3") return ChatFormat::deepseek_r1;
  if (name == "chatml" || name == "qwen2") return ChatFormat::chatml;
  if (name == "llama3") return ChatFormat::llama3;
  return Status::error("chat: unknown chat template '" + name + "'" + k_choose_hint);
}

Result<ChatFormat> detect_chat_format(const std::string& jinja) {
  if (jinja.find("<｜Assistant｜>") != std::string::npos) return ChatFormat::deepseek_r1;
  if (jinja.find("<|im_start|>") != std::string::npos) return ChatFormat::chatml;
  if (jinja.find("<|start_header_id|>") != std::string::npos) return ChatFormat::llama3;
  return Status::error(std::string("chat: the model's chat template is not one dsinfer knows") + k_choose_hint);
}

const char* chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::deepseek_r1: return "deepseek-r1";
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::llama3: return "llama3";
  }
  return "?";
}

Result<std::string> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                const std::string& bos_text) {
  DS_RETURN_IF_ERROR(check_roles(messages));
  switch (format) {
    case ChatFormat::deepseek_r1: return render_deepseek(messages, add_generation_prompt, bos_text);
    case ChatFormat::chatml: return render_chatml(messages, add_generation_prompt);
    case ChatFormat::llama3: return render_llama3(messages, add_generation_prompt, bos_text);
  }
  return Status::error("chat: unknown format");
}

Result<std::optional<std::string>> chat_template_of(const GgufFile& file) {
  if (!file.find("tokenizer.chat_template")) return std::optional<std::string>();
  auto text = file.get_string("tokenizer.chat_template");
  if (!text.ok()) return text.status();
  return std::optional<std::string>(text.take());
}

}  // namespace ds
