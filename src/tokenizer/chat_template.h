#pragma once
// The chat formats dsinfer renders natively (no Jinja engine): DeepSeek-R1 /
// V3, ChatML (Qwen2) and Llama 3. A model's `tokenizer.chat_template` is
// recognised by its markers; a name on the command line overrides it.

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf_file.h"

namespace ds {

enum class ChatFormat { deepseek_r1, chatml, llama3 };

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

// Names accepted by --chat-template: deepseek-r1 (alias deepseek3), chatml (alias qwen2), llama3.
Result<ChatFormat> chat_format_from_name(const std::string& name);
// Recognises a Jinja template by the markers its format uses.
Result<ChatFormat> detect_chat_format(const std::string& jinja_template);
const char* chat_format_name(ChatFormat format);
// The file's tokenizer.chat_template: nullopt when absent, an error naming the
// key when it is not a string.
Result<std::optional<std::string>> chat_template_of(const GgufFile& file);

// Renders messages as the model's own template would, bos_text first where the
// format starts with it. Errors name an unknown role.
Result<std::string> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& bos_text);

}  // namespace ds
