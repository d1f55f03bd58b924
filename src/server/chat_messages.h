#pragma once
// The conversation half of a chat request, checked against OpenAI's shapes
// and put in the form chat templates expect: messages (system, developer,
// user, assistant with tool_calls, tool results), tools, tool_choice,
// parallel_tool_calls and chat_template_kwargs. Each refusal names the field.

#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "template/chat_template.h"

namespace ds {

struct ToolChoice {
  enum class Mode { none, auto_, required, named };
  Mode mode = Mode::auto_;
  std::string name;  // named
};

// One offered function: its name and its parameters' JSON Schema, as JSON text.
struct ToolSpec {
  std::string name;
  std::string parameters_json;
};

struct ChatConversation {
  ChatInput input;  // messages, tools, chat_template_kwargs; add_generation_prompt true
  std::vector<ToolSpec> tools;
  ToolChoice tool_choice;  // without tools: none
  bool parallel_tool_calls = true;
  bool strict_tools = false;  // some function asks for strict arguments
};

constexpr size_t k_max_tools = 128;

// `body` is the request as an ordered tree (jinja::Value::parse_json), so
// that tools and arguments reach the template in the client's key order.
std::optional<ApiError> read_chat_conversation(const jinja::Value& body, ChatConversation& out);

}  // namespace ds
