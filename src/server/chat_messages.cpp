#include "server/chat_messages.h"

#include <set>

namespace ds {
namespace {

using jinja::Dict;
using jinja::List;
using jinja::Value;

std::optional<ApiError> refuse(const std::string& param, const std::string& message) { return ApiError::invalid(param, message); }

std::optional<ApiError> only_keys(const Dict& d, const std::set<std::string>& allowed, const std::string& where, const std::string& param) {
  for (const auto& [key, value] : d.items) {
    if (!allowed.count(key)) return refuse(param, "unknown field '" + where + "." + key + "'");
  }
  return std::nullopt;
}

const Value* present(const Dict& d, const std::string& key) {
  const Value* v = d.find(key);
  return v && !v->is_none() ? v : nullptr;
}

// A string, null, or text parts joined (only text is supported).
std::optional<ApiError> content_of(const Value* content, const std::string& where, Value& out) {
  if (!content || content->is_none()) {
    out = Value::none();
    return std::nullopt;
  }
  if (content->is_string()) {
    out = *content;
    return std::nullopt;
  }
  if (!content->is_list()) return refuse("messages", where + ".content must be a string or an array of text parts");
  std::string text;
  for (const Value& part : content->as_list()) {
    const Value* type = part.is_dict() ? part.as_dict().find("type") : nullptr;
    const Value* t = part.is_dict() ? part.as_dict().find("text") : nullptr;
    if (!type || !type->is_string() || type->as_string() != "text" || !t || !t->is_string() || part.as_dict().items.size() != 2) {
      return refuse("messages", where + ".content parts must be {\"type\": \"text\", \"text\": \"...\"} and nothing else (only text is supported)");
    }
    text += t->as_string();
  }
  out = Value(text);
  return std::nullopt;
}

// An assistant's tool_calls, with each function's arguments parsed from their
// JSON text into the object templates render (as vLLM does).
std::optional<ApiError> tool_calls_of(const Value& calls, const std::string& where, Value& out) {
  if (!calls.is_list()) return refuse("messages", where + ".tool_calls must be an array");
  List parsed;
  for (size_t j = 0; j < calls.as_list().size(); ++j) {
    const Value& call = calls.as_list()[j];
    const std::string at = where + ".tool_calls[" + std::to_string(j) + "]";
    if (!call.is_dict()) return refuse("messages", at + " must be an object");
    if (auto e = only_keys(call.as_dict(), {"id", "type", "function"}, at, "messages")) return e;
    const Value* id = present(call.as_dict(), "id");
    const Value* type = present(call.as_dict(), "type");
    const Value* function = present(call.as_dict(), "function");
    if (!id || !id->is_string()) return refuse("messages", at + ".id must be a string");
    if (type && (!type->is_string() || type->as_string() != "function")) return refuse("messages", at + ".type must be \"function\"");
    if (!function || !function->is_dict()) return refuse("messages", at + ".function must be an object");
    if (auto e = only_keys(function->as_dict(), {"name", "arguments"}, at + ".function", "messages")) return e;
    const Value* name = present(function->as_dict(), "name");
    const Value* arguments = present(function->as_dict(), "arguments");
    if (!name || !name->is_string()) return refuse("messages", at + ".function.name must be a string");
    Value args = Value(jinja::make_dict());
    if (arguments) {
      if (!arguments->is_string()) return refuse("messages", at + ".function.arguments must be a string of JSON");
      auto value = Value::parse_json(arguments->as_string());
      if (!value.ok() || !value.value().is_dict()) return refuse("messages", at + ".function.arguments must be a JSON object");
      args = value.take();
    }
    auto f = jinja::make_dict({{"name", *name}, {"arguments", args}});
    parsed.emplace_back(jinja::make_dict({{"id", *id}, {"type", Value("function")}, {"function", Value(f)}}));
  }
  out = Value(std::move(parsed));
  return std::nullopt;
}

std::optional<ApiError> read_messages(const Value* messages, Value& out) {
  if (!messages || messages->is_none()) return refuse("messages", "'messages' is required");
  if (!messages->is_list() || messages->as_list().empty()) return refuse("messages", "'messages' must be a non-empty array");
  List normalised;
  for (size_t i = 0; i < messages->as_list().size(); ++i) {
    const Value& m = messages->as_list()[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_dict()) return refuse("messages", where + " is not an object");
    const Dict& d = m.as_dict();
    const Value* role_value = present(d, "role");
    const std::string role = role_value && role_value->is_string() ? role_value->as_string() : "";
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool") {
      return refuse("messages", where + ".role must be system, developer, user, assistant or tool");
    }
    std::set<std::string> allowed = {"role", "content", "name"};
    if (role == "assistant") allowed.insert({"tool_calls", "reasoning_content", "refusal"});
    if (role == "tool") allowed.insert("tool_call_id");
    if (auto e = only_keys(d, allowed, where, "messages")) return e;
    auto message = jinja::make_dict({{"role", Value(role == "developer" ? "system" : role)}});
    Value content;
    if (auto e = content_of(d.find("content"), where, content)) return e;
    const Value* calls = present(d, "tool_calls");
    if (content.is_none() && !(role == "assistant" && calls)) return refuse("messages", where + ".content is required");
    message->set("content", content);
    if (const Value* name = present(d, "name")) {
      if (!name->is_string()) return refuse("messages", where + ".name must be a string");
      message->set("name", *name);
    }
    if (calls) {
      Value parsed;
      if (auto e = tool_calls_of(*calls, where, parsed)) return e;
      message->set("tool_calls", parsed);
    }
    if (const Value* reasoning = present(d, "reasoning_content")) {
      if (!reasoning->is_string()) return refuse("messages", where + ".reasoning_content must be a string");
      message->set("reasoning_content", *reasoning);
    }
    if (present(d, "refusal")) return refuse("messages", where + ".refusal is not supported in the history; send it as content");
    if (role == "tool") {
      const Value* id = present(d, "tool_call_id");
      if (!id || !id->is_string()) return refuse("messages", where + ".tool_call_id (a string) is required for a tool message");
      message->set("tool_call_id", *id);
    }
    normalised.emplace_back(message);
  }
  out = Value(std::move(normalised));
  return std::nullopt;
}

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    if (!std::isalnum(uint8_t(c)) && c != '_' && c != '-' && c != '.') return false;
  }
  return true;
}

std::optional<ApiError> read_tools(const Value& tools, ChatConversation& out) {
  if (!tools.is_list()) return refuse("tools", "'tools' must be an array");
  if (tools.as_list().size() > k_max_tools) return refuse("tools", "'tools' offers more than " + std::to_string(k_max_tools) + " functions");
  std::set<std::string> names;
  for (size_t i = 0; i < tools.as_list().size(); ++i) {
    const Value& t = tools.as_list()[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_dict()) return refuse("tools", where + " must be an object");
    if (auto e = only_keys(t.as_dict(), {"type", "function"}, where, "tools")) return e;
    const Value* type = present(t.as_dict(), "type");
    if (!type || !type->is_string() || type->as_string() != "function") return refuse("tools", where + ".type must be \"function\"");
    const Value* f = present(t.as_dict(), "function");
    if (!f || !f->is_dict()) return refuse("tools", where + ".function must be an object");
    if (auto e = only_keys(f->as_dict(), {"name", "description", "parameters", "strict"}, where + ".function", "tools")) return e;
    const Value* name = present(f->as_dict(), "name");
    if (!name || !name->is_string() || !valid_function_name(name->as_string())) {
      return refuse("tools", where + ".function.name must be 1 to 64 letters, digits, '_', '-' or '.'");
    }
    if (!names.insert(name->as_string()).second) return refuse("tools", "two tools are named '" + name->as_string() + "'");
    const Value* description = present(f->as_dict(), "description");
    if (description && !description->is_string()) return refuse("tools", where + ".function.description must be a string");
    const Value* parameters = present(f->as_dict(), "parameters");
    if (parameters && !parameters->is_dict()) return refuse("tools", where + ".function.parameters must be a JSON Schema object");
    const Value* strict = present(f->as_dict(), "strict");
    if (strict && !strict->is_bool()) return refuse("tools", where + ".function.strict must be true or false");
    if (strict && strict->as_bool()) out.strict_tools = true;
    out.tools.push_back({name->as_string(), parameters ? jinja::to_json(*parameters, std::nullopt, std::nullopt, false)
                                                       : "{\"type\": \"object\"}"});
  }
  out.input.tools = tools;
  return std::nullopt;
}

std::optional<ApiError> read_tool_choice(const Value* choice, ChatConversation& out) {
  const bool offered = !out.tools.empty();
  out.tool_choice.mode = offered ? ToolChoice::Mode::auto_ : ToolChoice::Mode::none;
  if (choice && choice->is_string()) {
    const std::string& c = choice->as_string();
    if (c == "none") out.tool_choice.mode = ToolChoice::Mode::none;
    else if (c == "auto") out.tool_choice.mode = ToolChoice::Mode::auto_;
    else if (c == "required") out.tool_choice.mode = ToolChoice::Mode::required;
    else return refuse("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  } else if (choice) {
    const Value* f = choice->is_dict() ? present(choice->as_dict(), "function") : nullptr;
    const Value* name = f && f->is_dict() ? present(f->as_dict(), "name") : nullptr;
    const Value* type = choice->is_dict() ? present(choice->as_dict(), "type") : nullptr;
    if (!name || !name->is_string() || !type || !type->is_string() || type->as_string() != "function") {
      return refuse("tool_choice", "a named 'tool_choice' is {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    out.tool_choice = {ToolChoice::Mode::named, name->as_string()};
    bool found = false;
    for (const ToolSpec& t : out.tools) found = found || t.name == name->as_string();
    if (!found) return refuse("tool_choice", "'tool_choice' names '" + name->as_string() + "', which is not among the tools");
  }
  if (out.strict_tools && out.tool_choice.mode == ToolChoice::Mode::auto_) {
    return refuse("tools", "'tools' marks a function strict, which is enforced only when a call is certain: with tool_choice "
                           "'required' or a named function (with 'auto' the reply may be text, and is not constrained)");
  }
  if (!offered && out.tool_choice.mode != ToolChoice::Mode::none) {
    return refuse("tool_choice", "'tool_choice' " + std::string(out.tool_choice.mode == ToolChoice::Mode::auto_ ? "auto" : "required or named") +
                                     " needs 'tools'");
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_chat_conversation(const Value& body, ChatConversation& out) {
  const Dict& d = body.as_dict();
  if (auto e = read_messages(d.find("messages"), out.input.messages)) return e;
  if (const Value* tools = present(d, "tools")) {
    if (auto e = read_tools(*tools, out)) return e;
  }
  if (auto e = read_tool_choice(present(d, "tool_choice"), out)) return e;
  if (const Value* parallel = present(d, "parallel_tool_calls")) {
    if (!parallel->is_bool()) return refuse("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
    out.parallel_tool_calls = parallel->as_bool();
  }
  out.input.kwargs = Value(jinja::make_dict());
  if (const Value* kwargs = present(d, "chat_template_kwargs")) {
    if (!kwargs->is_dict()) return refuse("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const auto& [key, value] : kwargs->as_dict().items) {
      if (key == "messages" || key == "tools" || key == "add_generation_prompt" || key == "bos_token" || key == "eos_token") {
        return refuse("chat_template_kwargs", "chat_template_kwargs." + key + " would replace what the request itself sets; give it as the request's own field");
      }
    }
    out.input.kwargs = *kwargs;
  }
  return std::nullopt;
}

}  // namespace ds
