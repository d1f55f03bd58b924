#include "template/chat_template.h"

#include <sys/stat.h>

#include "base/file_text.h"
#include "template/jinja_template.h"

namespace ds {
namespace {

using jinja::Value;

const char* const k_builtin_names = "deepseek-r1, chatml, llama3";

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return {};
  const size_t end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

struct PlainMessage {
  std::string role, content;
};

// The built-in formats render plain conversations: what they cannot show is refused, not dropped.
Result<std::vector<PlainMessage>> plain_messages(const ChatInput& input, const std::string& origin) {
  if (!input.tools.is_undefined() && !input.tools.is_none()) {
    return Status::error("tools need a Jinja chat template; the " + origin + " format renders none");
  }
  if (input.kwargs.is_dict() && !input.kwargs.as_dict().items.empty()) {
    return Status::error("chat_template_kwargs need a Jinja chat template; the " + origin + " format takes none ('" +
                         input.kwargs.as_dict().items[0].first + "')");
  }
  std::vector<PlainMessage> out;
  const jinja::List& messages = input.messages.as_list();
  for (size_t i = 0; i < messages.size(); ++i) {
    const jinja::Dict& m = messages[i].as_dict();
    const Value* role = m.find("role");
    const Value* content = m.find("content");
    const std::string r = role && role->is_string() ? role->as_string() : "";
    if (r != "system" && r != "user" && r != "assistant") {
      return Status::error("message " + std::to_string(i) + " has role '" + r + "', which the " + origin +
                           " format does not render (it renders system, user and assistant)");
    }
    if (m.find("tool_calls")) return Status::error("message " + std::to_string(i) + " has tool_calls, which the " + origin + " format does not render");
    out.push_back({r, content && content->is_string() ? content->as_string() : ""});
  }
  return out;
}

// DeepSeek-R1: the system prompt is hoisted to the front; an assistant turn
// keeps only what follows its reasoning.
std::string render_deepseek(const std::vector<PlainMessage>& messages, bool add_generation_prompt, const std::string& bos) {
  std::string system;
  for (const PlainMessage& m : messages) {
    if (m.role == "system") system = m.content;
  }
  std::string out = bos + system;
  for (const PlainMessage& m : messages) {
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

std::string render_chatml(const std::vector<PlainMessage>& messages, bool add_generation_prompt) {
  std::string out;
  if (messages.empty() || messages[0].role != "system") {
    out += "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n";
  }
  for (const PlainMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_llama3(const std::vector<PlainMessage>& messages, bool add_generation_prompt, const std::string& bos) {
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

bool is_file(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_jinja(const std::string& source, std::string origin) {
  auto parsed = jinja::JinjaTemplate::parse(source);
  if (!parsed.ok()) return Status::error("chat template (" + origin + "): " + parsed.message());
  ChatTemplate t;
  t.jinja_ = std::make_shared<const jinja::JinjaTemplate>(parsed.take());
  t.origin_ = std::move(origin);
  t.has_reasoning_ = source.find("<think>") != std::string::npos;
  t.tool_call_format_ = tool_call_format_of_template(source);
  return t;
}

Result<ChatTemplate> ChatTemplate::builtin(const std::string& name) {
  ChatTemplate t;
  if (name == "deepseek-r1" || name == "deepseek3") t.builtin_ = BuiltinChatFormat::deepseek_r1;
  else if (name == "chatml" || name == "qwen2") t.builtin_ = BuiltinChatFormat::chatml;
  else if (name == "llama3") t.builtin_ = BuiltinChatFormat::llama3;
  else return Status::error("chat: unknown built-in chat template '" + name + "' (built-ins: " + k_builtin_names + ")");
  t.origin_ = "built-in " + name;
  t.has_reasoning_ = t.builtin_ == BuiltinChatFormat::deepseek_r1;
  return t;
}

Result<std::optional<ChatTemplate>> ChatTemplate::choose(const GgufFile* file, const std::string& choice) {
  using Found = std::optional<ChatTemplate>;
  auto wrap = [](Result<ChatTemplate> t) -> Result<Found> {
    if (!t.ok()) return t.status();
    return Found(t.take());
  };
  if (choice.empty()) {
    if (!file) return Found();
    auto source = chat_template_of(*file);
    if (!source.ok()) return source.status();
    if (!source.value()) return Found();
    return wrap(from_jinja(*source.value(), "tokenizer.chat_template"));
  }
  if (is_file(choice)) {
    const std::optional<std::string> source = read_file_text(choice);
    if (!source) return Status::error("cannot read the chat template file '" + choice + "'");
    return wrap(from_jinja(*source, "file " + choice));
  }
  const std::string key = "tokenizer.chat_template." + choice;
  if (file && file->find(key)) {
    auto source = file->get_string(key);
    if (!source.ok()) return source.status();
    return wrap(from_jinja(source.value(), key));
  }
  auto t = builtin(choice);
  if (!t.ok()) {
    return Status::error("chat: --chat-template '" + choice + "' is not a file, " +
                         (file ? "not a " + key + " variant in the model, " : std::string()) + "nor a built-in (" + k_builtin_names + ")");
  }
  return wrap(t.take());
}

Result<std::string> ChatTemplate::render(const ChatInput& input, const ChatSpecialTokens& tokens,
                                         const std::function<std::time_t()>& now) const {
  if (!input.messages.is_list()) return Status::error("chat: messages must be a list");
  if (jinja_) {
    auto context = jinja::make_dict();
    if (input.kwargs.is_dict()) {
      for (const auto& [key, value] : input.kwargs.as_dict().items) context->set(key, value);
    }
    context->set("messages", input.messages);
    if (!input.tools.is_undefined()) context->set("tools", input.tools);
    context->set("add_generation_prompt", Value(input.add_generation_prompt));
    context->set("bos_token", Value(tokens.bos));
    context->set("eos_token", Value(tokens.eos));
    auto text = jinja_->render(Value(context), now);
    if (!text.ok()) return Status::error("chat template (" + origin_ + "): " + text.message());
    return text;
  }
  auto messages = plain_messages(input, origin_);
  if (!messages.ok()) return Status::error("chat: " + messages.message());
  switch (builtin_) {
    case BuiltinChatFormat::deepseek_r1: return render_deepseek(messages.value(), input.add_generation_prompt, tokens.bos);
    case BuiltinChatFormat::chatml: return render_chatml(messages.value(), input.add_generation_prompt);
    case BuiltinChatFormat::llama3: return render_llama3(messages.value(), input.add_generation_prompt, tokens.bos);
  }
  return Status::error("chat: unknown format");
}

bool opens_reasoning(const std::string& prompt) {
  const size_t end = prompt.find_last_not_of(" \t\r\n");
  const std::string open = "<think>";
  return end != std::string::npos && end + 1 >= open.size() && prompt.compare(end + 1 - open.size(), open.size(), open) == 0;
}

Result<std::optional<std::string>> chat_template_of(const GgufFile& file) {
  if (!file.find("tokenizer.chat_template")) return std::optional<std::string>();
  auto text = file.get_string("tokenizer.chat_template");
  if (!text.ok()) return text.status();
  return std::optional<std::string>(text.take());
}

}  // namespace ds
