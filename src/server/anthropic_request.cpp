#include "server/anthropic_request.h"

#include <map>

#include "server/request_fields.h"

namespace ds {
namespace {

using json = OrderedJson;

const std::set<std::string> k_fields = {"model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream",
                                        "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking", "output_config",
                                        "cache_control"};
const std::set<std::string> k_count_fields = {"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config",
                                              "cache_control"};
// Anthropic's, which dsinfer does not implement: refused by name.
const std::set<std::string> k_unimplemented = {"service_tier", "container", "mcp_servers", "context_management", "diagnostics",
                                               "inference_geo", "speed", "user_profile_id", "workspace_id"};

// The chat request's field an error names, put back as the Anthropic field it came from.
const std::map<std::string, std::string> k_field_origin = {{"stop", "stop_sequences"},
                                                           {"user", "metadata"},
                                                           {"chat_template_kwargs", "thinking"},
                                                           {"parallel_tool_calls", "tool_choice"},
                                                           {"response_format", "output_config"}};

// cache_control on a block: {"type": "ephemeral", "ttl"?}; the prefix cache keeps every shared prefix without it.
void check_cache_control(const json& block, const std::string& where, const std::string& field) {
  const json* control = member(block, "cache_control");
  if (!control) return;
  const std::string at = (where.empty() ? "" : where + ".") + "cache_control";
  if (!control->is_object() || control->value("type", "") != "ephemeral") refuse_field(field, at + " must be {\"type\": \"ephemeral\"}");
  only_fields(*control, {"type", "ttl"}, at, field);
  if (const json* ttl = member(*control, "ttl"); ttl && *ttl != "5m" && *ttl != "1h") refuse_field(field, at + ".ttl must be 5m or 1h");
}

std::string text_of_block(const json& block, const std::string& where, const std::string& field) {
  only_fields(block, {"type", "text", "cache_control"}, where, field);
  check_cache_control(block, where, field);
  const json* text = member(block, "text");
  if (!text || !text->is_string()) refuse_field(field, where + ".text must be a string");
  return text->get<std::string>();
}

std::string block_type(const json& block, const std::string& where, const std::string& field) {
  if (!block.is_object()) refuse_field(field, where + " must be an object");
  const json* type = member(block, "type");
  if (!type || !type->is_string()) refuse_field(field, where + ".type must be a string");
  return type->get<std::string>();
}

[[noreturn]] void refuse_block(const std::string& type, const std::string& where, const std::string& field) {
  if (type == "image" || type == "document" || type == "search_result") {
    refuse_field(field, where + ": '" + type + "' content is not supported by dsinfer (text only)");
  }
  if (type == "redacted_thinking") refuse_field(field, where + ": redacted_thinking is not supported by dsinfer");
  refuse_field(field, where + ": content blocks of type '" + type + "' are not supported here");
}

// A string, or text blocks joined.
std::string text_content(const json& content, const std::string& where, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) refuse_field(field, where + " must be a string or an array of text blocks");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const std::string type = block_type(content[i], at, field);
    if (type != "text") refuse_block(type, at, field);
    text += text_of_block(content[i], at, field);
  }
  return text;
}

void user_message(const json& content, const std::string& where, json& out) {
  if (content.is_string()) {
    out.push_back({{"role", "user"}, {"content", content}});
    return;
  }
  if (!content.is_array() || content.empty()) refuse_field("messages", where + ".content must be a string or a non-empty array of content blocks");
  std::string text;
  bool has_text = false;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    const std::string type = block_type(content[i], at, "messages");
    if (type == "text") {
      text += text_of_block(content[i], at, "messages");
      has_text = true;
    } else if (type == "tool_result") {
      if (has_text) refuse_field("messages", at + ": tool_result blocks come before any text in a user message");
      only_fields(content[i], {"type", "tool_use_id", "content", "is_error", "cache_control"}, at, "messages");
      check_cache_control(content[i], at, "messages");
      const json* id = member(content[i], "tool_use_id");
      if (!id || !id->is_string()) refuse_field("messages", at + ".tool_use_id must be a string");
      const json* result = member(content[i], "content");
      std::string result_text = result ? text_content(*result, at + ".content", "messages") : "";
      const json* is_error = member(content[i], "is_error");
      if (is_error && !is_error->is_boolean()) refuse_field("messages", at + ".is_error must be true or false");
      if (is_error && is_error->get<bool>()) result_text = "Error: " + result_text;
      out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result_text}});
    } else {
      refuse_block(type, at, "messages");
    }
  }
  if (has_text) out.push_back({{"role", "user"}, {"content", text}});
}

void assistant_message(const json& content, const std::string& where, json& out) {
  json message = {{"role", "assistant"}};
  if (content.is_string()) {
    message["content"] = content;
    out.push_back(message);
    return;
  }
  if (!content.is_array()) refuse_field("messages", where + ".content must be a string or an array of content blocks");
  std::string text, reasoning;
  json calls = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    const std::string type = block_type(content[i], at, "messages");
    if (type == "text") {
      text += text_of_block(content[i], at, "messages");
    } else if (type == "thinking") {
      only_fields(content[i], {"type", "thinking", "signature"}, at, "messages");
      const json* thinking = member(content[i], "thinking");
      if (!thinking || !thinking->is_string()) refuse_field("messages", at + ".thinking must be a string");
      reasoning += thinking->get<std::string>();
    } else if (type == "tool_use") {
      only_fields(content[i], {"type", "id", "name", "input", "cache_control"}, at, "messages");
      check_cache_control(content[i], at, "messages");
      const json* id = member(content[i], "id");
      const json* name = member(content[i], "name");
      const json* input = member(content[i], "input");
      if (!id || !id->is_string()) refuse_field("messages", at + ".id must be a string");
      if (!name || !name->is_string()) refuse_field("messages", at + ".name must be a string");
      if (!input || !input->is_object()) refuse_field("messages", at + ".input must be an object");
      calls.push_back({{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", input->dump()}}}});
    } else {
      refuse_block(type, at, "messages");
    }
  }
  message["content"] = calls.empty() || !text.empty() ? json(text) : json(nullptr);
  if (!calls.empty()) message["tool_calls"] = calls;
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  out.push_back(message);
}

json messages_of(const json& body) {
  json out = json::array();
  if (const json* system = member(body, "system")) out.push_back({{"role", "system"}, {"content", text_content(*system, "system", "system")}});
  const json* messages = member(body, "messages");
  if (!messages) refuse_field("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty()) refuse_field("messages", "'messages' must be a non-empty array");
  if (messages->back().is_object() && messages->back().value("role", json()) == "assistant") {
    refuse_field("messages", "a last message from the assistant (prefill, continuing its reply) is not supported by dsinfer");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) refuse_field("messages", where + " must be an object");
    only_fields(m, {"role", "content"}, where, "messages");
    const std::string role = m.value("role", json()).is_string() ? m["role"].get<std::string>() : "";
    const json* content = member(m, "content");
    if (!content) refuse_field("messages", where + ".content is required");
    if (role == "user") user_message(*content, where, out);
    else if (role == "assistant") assistant_message(*content, where, out);
    else refuse_field("messages", where + ".role must be user or assistant (the system prompt is the top-level 'system')");
  }
  return out;
}

json tools_of(const json& tools) {
  json out = json::array();
  each_item(tools, "tools", [&](const json& t, const std::string& where) {
    if (!t.is_object()) refuse_field("tools", where + " must be an object");
    if (const json* type = member(t, "type"); type && !(type->is_string() && type->get<std::string>() == "custom")) {
      refuse_field("tools", where + ": server and client tools of type '" + (type->is_string() ? type->get<std::string>() : "?") +
                        "' are not supported by dsinfer (only your own tools, with an input_schema)");
    }
    only_fields(t, {"type", "name", "description", "input_schema", "cache_control"}, where, "tools");
    check_cache_control(t, where, "tools");
    const json* schema = member(t, "input_schema");
    if (!schema || !schema->is_object()) refuse_field("tools", where + ".input_schema must be a JSON Schema object");
    json function = {{"name", t.value("name", json())}};
    if (const json* description = member(t, "description")) function["description"] = *description;
    function["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", function}});
  });
  return out;
}

void tool_choice_of(const json& choice, json& chat) {
  if (!choice.is_object()) refuse_field("tool_choice", "'tool_choice' must be an object: {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
  const std::string type = choice.value("type", json()).is_string() ? choice["type"].get<std::string>() : "";
  only_fields(choice, type == "tool" ? std::set<std::string>{"type", "name", "disable_parallel_tool_use"}
                                   : std::set<std::string>{"type", "disable_parallel_tool_use"},
            "tool_choice", "tool_choice");
  if (type == "auto") chat["tool_choice"] = "auto";
  else if (type == "any") chat["tool_choice"] = "required";
  else if (type == "none") chat["tool_choice"] = "none";
  else if (type == "tool") {
    const json* name = member(choice, "name");
    if (!name || !name->is_string()) refuse_field("tool_choice", "tool_choice.name must name a tool");
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    refuse_field("tool_choice", "tool_choice.type must be auto, any, tool or none");
  }
  if (const json* single = member(choice, "disable_parallel_tool_use")) {
    if (!single->is_boolean()) refuse_field("tool_choice", "tool_choice.disable_parallel_tool_use must be true or false");
    chat["parallel_tool_calls"] = !single->get<bool>();
  }
}

// thinking.display: summarized (the thinking as written) or omitted (its blocks come back empty).
bool omits_thinking(const json& thinking) {
  const json* display = member(thinking, "display");
  if (!display) return false;
  if (*display != "summarized" && *display != "omitted") refuse_field("thinking", "thinking.display must be summarized or omitted");
  return *display == "omitted";
}

void thinking_of(const json& thinking, const json* max_tokens, json& chat) {
  if (!thinking.is_object()) refuse_field("thinking", "'thinking' must be an object");
  const std::string type = thinking.value("type", json()).is_string() ? thinking["type"].get<std::string>() : "";
  if (type == "disabled") {
    only_fields(thinking, {"type"}, "thinking", "thinking");
    chat["chat_template_kwargs"] = {{"thinking", false}, {"enable_thinking", false}};
    return;
  }
  if (type == "adaptive") {  // the model decides how much it thinks: thinking is allowed
    only_fields(thinking, {"type", "display"}, "thinking", "thinking");
    chat["chat_template_kwargs"] = {{"thinking", true}, {"enable_thinking", true}};
    return;
  }
  if (type != "enabled") refuse_field("thinking", "thinking.type must be enabled, adaptive or disabled (between_tools is not supported)");
  only_fields(thinking, {"type", "budget_tokens", "display"}, "thinking", "thinking");
  const json* budget = member(thinking, "budget_tokens");
  if (!budget || !budget->is_number_integer() || budget->get<int64_t>() < 1024) refuse_field("thinking", "thinking.budget_tokens must be an integer of at least 1024");
  if (max_tokens && max_tokens->is_number_integer() && budget->get<int64_t>() >= max_tokens->get<int64_t>()) {
    refuse_field("thinking", "thinking.budget_tokens must be less than max_tokens");
  }
  chat["chat_template_kwargs"] = {{"thinking", true}, {"enable_thinking", true}, {"thinking_budget", *budget}};
}

// output_config.format json_schema: the reply constrained by the schema (as response_format is).
void output_config_of(const json& output, json& chat) {
  if (!output.is_object()) refuse_field("output_config", "'output_config' must be an object");
  only_fields(output, {"format", "effort"}, "output_config", "output_config");
  if (member(output, "effort")) refuse_field("output_config", "output_config.effort is not supported by dsinfer");
  const json* format = member(output, "format");
  if (!format) return;
  if (!format->is_object() || format->value("type", json()) != "json_schema") refuse_field("output_config", "output_config.format.type must be json_schema");
  only_fields(*format, {"type", "schema"}, "output_config.format", "output_config");
  const json* schema = member(*format, "schema");
  if (!schema || !schema->is_object()) refuse_field("output_config", "output_config.format.schema must be a JSON Schema object");
  chat["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
}

json chat_request_of(const json& body, bool count_tokens) {
  for (const auto& [key, value] : body.items()) {
    if ((count_tokens ? k_count_fields : k_fields).count(key)) continue;
    if (k_unimplemented.count(key)) refuse_field(key, "'" + key + "' is not supported by dsinfer; remove it from the request");
    refuse_field(key, "unknown field '" + key + "'");
  }
  json chat = {{"messages", messages_of(body)}};
  const json* model = member(body, "model");
  if (!model || !model->is_string()) refuse_field("model", "'model' (a string) is required");
  chat["model"] = *model;
  const json* max_tokens = member(body, "max_tokens");
  if (!count_tokens) {
    if (!max_tokens || !max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1) refuse_field("max_tokens", "'max_tokens' (an integer of at least 1) is required");
    chat["max_tokens"] = *max_tokens;
  }
  if (const json* tools = member(body, "tools")) chat["tools"] = tools_of(*tools);
  if (const json* choice = member(body, "tool_choice")) tool_choice_of(*choice, chat);
  if (const json* thinking = member(body, "thinking")) thinking_of(*thinking, max_tokens, chat);
  check_cache_control(body, "", "cache_control");
  if (const json* output = member(body, "output_config")) output_config_of(*output, chat);
  if (count_tokens) return chat;
  if (const json* temperature = member(body, "temperature")) {
    if (!temperature->is_number() || temperature->get<double>() < 0 || temperature->get<double>() > 1) refuse_field("temperature", "'temperature' must be a number in [0, 1]");
    chat["temperature"] = *temperature;
  }
  if (const json* top_p = member(body, "top_p")) chat["top_p"] = *top_p;
  if (const json* top_k = member(body, "top_k")) {
    if (!top_k->is_number_integer() || top_k->get<int64_t>() < 0) refuse_field("top_k", "'top_k' must be a non-negative integer");
    chat["top_k"] = *top_k;
  }
  if (const json* stops = member(body, "stop_sequences")) {
    if (!stops->is_array()) refuse_field("stop_sequences", "'stop_sequences' must be an array of strings");
    chat["stop"] = *stops;
  }
  if (const json* stream = member(body, "stream")) {
    chat["stream"] = *stream;
    if (stream->is_boolean() && stream->get<bool>()) chat["stream_options"] = {{"include_usage", true}};
  }
  if (const json* metadata = member(body, "metadata")) {
    if (!metadata->is_object()) refuse_field("metadata", "'metadata' must be an object");
    only_fields(*metadata, {"user_id"}, "metadata", "metadata");
    if (const json* user = member(*metadata, "user_id")) {
      if (!user->is_string()) refuse_field("metadata", "metadata.user_id must be a string");
      chat["user"] = *user;
    }
  }
  return chat;
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_anthropic_request(const std::string& body, bool count_tokens) {
  auto object = parse_json_object<json>(body);
  if (auto* error = std::get_if<ApiError>(&object)) return *error;
  const json& parsed = std::get<json>(object);
  json chat;
  bool omit_thinking = false;
  try {
    chat = chat_request_of(parsed, count_tokens);
    if (const json* thinking = member(parsed, "thinking")) omit_thinking = omits_thinking(*thinking);
  } catch (const RequestFieldError& failure) {
    return failure.error;
  }
  auto request = parse_completion_request(Endpoint::chat, chat.dump());
  if (auto* error = std::get_if<ApiError>(&request)) {
    ApiError e = *error;
    if (auto origin = k_field_origin.find(e.param); origin != k_field_origin.end()) e.param = origin->second;
    return e;
  }
  CompletionRequest out = std::move(std::get<CompletionRequest>(request));
  out.endpoint = Endpoint::messages;
  out.omit_reasoning = omit_thinking;
  return out;
}

std::string anthropic_error_json(const ApiError& error) {
  const char* type = "api_error";
  switch (error.status) {
    case 400:
    case 405:
    case 422: type = "invalid_request_error"; break;
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503:
    case 529: type = "overloaded_error"; break;
    default: break;
  }
  const nlohmann::json body = {{"type", "error"}, {"error", {{"type", type}, {"message", error.message}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ds
