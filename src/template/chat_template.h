#pragma once
// A model's chat template: the Jinja source its GGUF carries
// (tokenizer.chat_template, or a named tokenizer.chat_template.NAME variant),
// a Jinja file given on the command line, or, for files that carry none, one
// of three built-in formats (deepseek-r1, chatml, llama3) rendered natively.
//
// A Jinja template sees what transformers' apply_chat_template gives it:
// messages, tools, add_generation_prompt, bos_token, eos_token, and the
// request's chat_template_kwargs (thinking / enable_thinking switches live
// there).

#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "template/jinja_value.h"
#include "template/tool_call_parser.h"

namespace ds {

namespace jinja {
class JinjaTemplate;
}

// What one request asks the template to render. messages is a list of dicts
// (role, content, and where given tool_calls with parsed arguments,
// tool_call_id, name, reasoning_content); tools a list or undefined; kwargs a dict.
struct ChatInput {
  jinja::Value messages;
  jinja::Value tools;
  bool add_generation_prompt = true;
  jinja::Value kwargs;
};

// The text of the vocabulary's special tokens, as the template refers to them.
struct ChatSpecialTokens {
  std::string bos, eos;
};

enum class BuiltinChatFormat { deepseek_r1, chatml, llama3 };

class ChatTemplate {
 public:
  static Result<ChatTemplate> from_jinja(const std::string& source, std::string origin);
  // deepseek-r1 (alias deepseek3), chatml (alias qwen2), llama3.
  static Result<ChatTemplate> builtin(const std::string& name);

  // The template for a model. `choice` (--chat-template) is a file path, the
  // NAME of a tokenizer.chat_template.NAME variant, or a built-in name; empty
  // means the file's own tokenizer.chat_template. nullopt: the file has none.
  // Without a model file, `choice` must be a path or a built-in.
  static Result<std::optional<ChatTemplate>> choose(const GgufFile* file, const std::string& choice);

  // Errors name the template line and what failed (a template's own
  // raise_exception message, a value it needed and did not get).
  Result<std::string> render(const ChatInput& input, const ChatSpecialTokens& tokens,
                             const std::function<std::time_t()>& now = [] { return std::time(nullptr); }) const;

  // Where it came from: "tokenizer.chat_template", "file X", "built-in deepseek-r1".
  const std::string& origin() const { return origin_; }
  // Whether the format has a reasoning section (<think> ... </think>), as the
  // DeepSeek-R1 family's do: the server then splits reasoning_content out.
  bool has_reasoning() const { return has_reasoning_; }
  // The format the template writes tool calls in, so replies are parsed in it
  // too (none for the built-ins, which render no tools).
  ToolCallFormat tool_call_format() const { return tool_call_format_; }

 private:
  std::shared_ptr<const jinja::JinjaTemplate> jinja_;
  BuiltinChatFormat builtin_ = BuiltinChatFormat::chatml;
  std::string origin_;
  bool has_reasoning_ = false;
  ToolCallFormat tool_call_format_ = ToolCallFormat::none;
};

// Whether a rendered prompt leaves a reasoning section open for the model
// (ends with <think>, as R1 templates prefill it): the reply then starts as reasoning.
bool opens_reasoning(const std::string& prompt);

// The file's tokenizer.chat_template: nullopt when absent, an error naming the
// key when it is not a string.
Result<std::optional<std::string>> chat_template_of(const GgufFile& file);

}  // namespace ds
