#include "server/responses_request.h"

#include <random>

#include "server/request_fields.h"

namespace ds {
namespace {

using json = OrderedJson;

const std::set<std::string> k_fields = {"model", "input", "instructions", "previous_response_id", "tools", "tool_choice",
                                        "parallel_tool_calls", "text", "max_output_tokens", "temperature", "top_p", "stream",
                                        "store", "metadata", "user", "truncation", "reasoning"};
// OpenAI's, which dsinfer does not implement: refused by name unless null.
const std::set<std::string> k_unimplemented = {"background", "include", "service_tier", "prompt", "prompt_cache_key",
                                               "safety_identifier", "conversation", "max_tool_calls", "top_logprobs",
                                               "stream_options", "prompt_cache_retention"};

std::string item_id(const char* prefix) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char id[48];
  std::snprintf(id, sizeof id, "%s_%016llx%08llx", prefix, (unsigned long long)random(), (unsigned long long)(random() & 0xffffffffu));
  return id;
}

// A message's content: a string, or text parts (input_text, output_text) joined.
std::string text_of(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) refuse_field("input", where + " must be a string or an array of text parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    const std::string type = part.is_object() && part.value("type", json()).is_string() ? part["type"].get<std::string>() : "";
    if (type != "input_text" && type != "output_text") {
      refuse_field("input", at + ": parts of type '" + type + "' are not supported by dsinfer (input_text and output_text are)");
    }
    only_fields(part, {"type", "text", "annotations", "logprobs"}, at, "input");
    const json* t = member(part, "text");
    if (!t || !t->is_string()) refuse_field("input", at + ".text must be a string");
    text += t->get<std::string>();
  }
  return text;
}

// Items (the input's, or a stored history's) as chat messages appended to `messages`.
void append_messages(const json& items, json& messages) {
  std::string reasoning;  // a reasoning item goes with the assistant turn after it
  auto assistant = [&]() -> json& {
    if (messages.empty() || messages.back()["role"] != "assistant" || messages.back().contains("tool_call_id")) {
      messages.push_back({{"role", "assistant"}, {"content", nullptr}});
    }
    json& m = messages.back();
    if (!reasoning.empty()) m["reasoning_content"] = reasoning, reasoning.clear();
    return m;
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const json& item = items[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) refuse_field("input", where + " must be an object");
    const std::string type = item.value("type", json()).is_string() ? item["type"].get<std::string>() : "message";
    if (type == "message") {
      only_fields(item, {"type", "id", "role", "content", "status"}, where, "input");
      const std::string role = item.value("role", json()).is_string() ? item["role"].get<std::string>() : "";
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        refuse_field("input", where + ".role must be user, assistant, system or developer");
      }
      const json* content = member(item, "content");
      if (!content) refuse_field("input", where + ".content is required");
      const std::string text = text_of(*content, where + ".content");
      if (role == "assistant") {
        json& m = assistant();
        m["content"] = (m["content"].is_string() ? m["content"].get<std::string>() : "") + text;
      } else {
        messages.push_back({{"role", role == "developer" ? "system" : role}, {"content", text}});
      }
    } else if (type == "function_call") {
      only_fields(item, {"type", "id", "call_id", "name", "arguments", "status"}, where, "input");
      for (const char* key : {"call_id", "name", "arguments"}) {
        if (!member(item, key) || !item[key].is_string()) refuse_field("input", where + "." + key + " must be a string");
      }
      json& m = assistant();
      if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
      m["tool_calls"].push_back({{"id", item["call_id"]}, {"type", "function"},
                                 {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    } else if (type == "function_call_output") {
      only_fields(item, {"type", "id", "call_id", "output", "status"}, where, "input");
      const json* call = member(item, "call_id");
      const json* output = member(item, "output");
      if (!call || !call->is_string()) refuse_field("input", where + ".call_id must be a string");
      if (!output) refuse_field("input", where + ".output is required");
      messages.push_back({{"role", "tool"}, {"tool_call_id", *call}, {"content", text_of(*output, where + ".output")}});
    } else if (type == "reasoning") {
      only_fields(item, {"type", "id", "summary", "content", "encrypted_content", "status"}, where, "input");
      if (member(item, "encrypted_content")) refuse_field("input", where + ".encrypted_content is not supported by dsinfer");
      if (const json* content = member(item, "content")) {
        if (!content->is_array()) refuse_field("input", where + ".content must be an array of reasoning_text parts");
        for (const json& part : *content) {
          if (!part.is_object() || part.value("type", json()) != "reasoning_text" || !part.value("text", json()).is_string()) {
            refuse_field("input", where + ".content parts must be {\"type\": \"reasoning_text\", \"text\": ...}");
          }
          reasoning += part["text"].get<std::string>();
        }
      }
    } else {
      refuse_field("input", where + ": items of type '" + type + "' are not supported by dsinfer");
    }
  }
  if (!reasoning.empty()) assistant();
}

// The input as items, each with an id (a string is one user message).
json input_items(const json& input) {
  if (input.is_string()) return json::array({{{"type", "message"}, {"id", item_id("msg")}, {"role", "user"},
                                              {"content", json::array({{{"type", "input_text"}, {"text", input}}})}}});
  if (!input.is_array() || input.empty()) refuse_field("input", "'input' must be a string or a non-empty array of items");
  json items = json::array();
  for (json item : input) {
    if (item.is_object() && !item.contains("type")) item["type"] = "message";
    if (item.is_object() && !member(item, "id")) {
      const std::string type = item.value("type", json()).is_string() ? item["type"].get<std::string>() : "";
      item["id"] = item_id(type == "function_call" ? "fc" : type == "function_call_output" ? "fco" : type == "reasoning" ? "rs" : "msg");
    }
    items.push_back(item);
  }
  return items;
}

json tools_of(const json& tools) {
  json out = json::array();
  each_item(tools, "tools", [&](const json& t, const std::string& where) {
    if (!t.is_object() || t.value("type", json()) != "function") {
      const std::string type = t.is_object() && t.value("type", json()).is_string() ? t["type"].get<std::string>() : "?";
      refuse_field("tools", where + ": tools of type '" + type + "' are not supported by dsinfer (function tools are)");
    }
    only_fields(t, {"type", "name", "description", "parameters", "strict"}, where, "tools");
    json function = {{"name", t.value("name", json())}};
    for (const char* key : {"description", "parameters", "strict"}) {
      if (const json* v = member(t, key)) function[key] = *v;
    }
    out.push_back({{"type", "function"}, {"function", function}});
  });
  return out;
}

json tool_choice_of(const json& choice) {
  if (choice.is_string()) return choice;  // none, auto, required: the chat parser checks the word
  if (!choice.is_object() || choice.value("type", json()) != "function" || !choice.value("name", json()).is_string()) {
    refuse_field("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
  }
  only_fields(choice, {"type", "name"}, "tool_choice", "tool_choice");
  return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
}

json response_format_of(const json& text) {
  if (!text.is_object()) refuse_field("text", "'text' must be an object");
  only_fields(text, {"format", "verbosity"}, "text", "text");
  if (member(text, "verbosity")) refuse_field("text", "text.verbosity is not supported by dsinfer");
  const json* format = member(text, "format");
  if (!format) return nullptr;
  if (!format->is_object()) refuse_field("text", "text.format must be an object");
  const std::string type = format->value("type", json()).is_string() ? (*format)["type"].get<std::string>() : "";
  if (type == "text" || type == "json_object") {
    only_fields(*format, {"type"}, "text.format", "text");
    return {{"type", type}};
  }
  if (type != "json_schema") refuse_field("text", "text.format.type must be text, json_object or json_schema");
  only_fields(*format, {"type", "name", "schema", "strict", "description"}, "text.format", "text");
  json schema = {{"name", format->value("name", json())}};
  for (const char* key : {"schema", "strict", "description"}) {
    if (const json* v = member(*format, key)) schema[key] = *v;
  }
  return {{"type", "json_schema"}, {"json_schema", schema}};
}

ResponsesRequest build(const json& body, const ResponseHistory& history) {
  for (const auto& [key, value] : body.items()) {
    if (k_fields.count(key)) continue;
    if (k_unimplemented.count(key)) {
      if (value.is_null()) continue;
      refuse_field(key, "'" + key + "' is not supported by dsinfer; remove it from the request");
    }
    refuse_field(key, "unknown field '" + key + "'");
  }
  ResponsesRequest out;
  json context = json::array();
  if (const json* previous = member(body, "previous_response_id")) {
    if (!previous->is_string()) refuse_field("previous_response_id", "'previous_response_id' must be a string");
    out.previous_response_id = previous->get<std::string>();
    const std::optional<std::string> stored = history ? history(out.previous_response_id) : std::nullopt;
    if (!stored) {
      throw RequestFieldError{ApiError{404, "no stored response '" + out.previous_response_id.substr(0, 128) + "'", "invalid_request_error",
                                       "previous_response_id", "not_found", 0}};
    }
    context = json::parse(*stored, nullptr, false);
    if (!context.is_array()) {
      throw RequestFieldError{ApiError{500, "the stored response '" + out.previous_response_id.substr(0, 128) + "' is unreadable",
                                       "server_error", "previous_response_id", "", 0}};
    }
  }
  const json* input = member(body, "input");
  if (!input) refuse_field("input", "'input' is required");
  const json items = input_items(*input);
  json messages = json::array();
  json echo = json::object();
  if (const json* instructions = member(body, "instructions")) {
    if (!instructions->is_string()) refuse_field("instructions", "'instructions' must be a string");
    messages.push_back({{"role", "system"}, {"content", *instructions}});
    echo["instructions"] = *instructions;
  }
  append_messages(context, messages);
  append_messages(items, messages);
  for (const json& item : items) context.push_back(item);
  json chat = {{"messages", messages}};
  if (const json* model = member(body, "model")) chat["model"] = *model;
  if (const json* tools = member(body, "tools")) chat["tools"] = tools_of(*tools), echo["tools"] = *tools;
  if (const json* choice = member(body, "tool_choice")) chat["tool_choice"] = tool_choice_of(*choice), echo["tool_choice"] = *choice;
  if (const json* text = member(body, "text")) {
    if (json format = response_format_of(*text); !format.is_null()) chat["response_format"] = format;
    echo["text"] = *text;
  }
  if (const json* truncation = member(body, "truncation"); truncation && *truncation != "disabled") {
    refuse_field("truncation", "truncation 'auto' is not supported by dsinfer (a prompt beyond the context is refused): give disabled");
  }
  for (const auto& [from, to] : {std::pair{"max_output_tokens", "max_tokens"}, {"temperature", "temperature"}, {"top_p", "top_p"},
                                 {"parallel_tool_calls", "parallel_tool_calls"}, {"stream", "stream"}, {"user", "user"}}) {
    if (const json* v = member(body, from)) chat[to] = *v, echo[from] = *v;
  }
  if (const json* reasoning = member(body, "reasoning")) {
    // The template's thinking switch: effort none turns it off, any other level on (the level itself is the model's).
    if (!reasoning->is_object()) refuse_field("reasoning", "'reasoning' must be an object");
    only_fields(*reasoning, {"effort"}, "reasoning", "reasoning");
    const json* effort = member(*reasoning, "effort");
    static const std::set<std::string> efforts = {"none", "minimal", "low", "medium", "high", "xhigh"};
    if (effort && (!effort->is_string() || !efforts.count(effort->get<std::string>()))) {
      refuse_field("reasoning", "reasoning.effort must be none, minimal, low, medium, high or xhigh");
    }
    const bool on = !effort || *effort != "none";
    chat["chat_template_kwargs"] = {{"thinking", on}, {"enable_thinking", on}};
    echo["reasoning"] = *reasoning;
  }
  if (const json* store = member(body, "store")) {
    if (!store->is_boolean()) refuse_field("store", "'store' must be true or false");
    out.store = store->get<bool>();
    out.store_asked = true;
  }
  if (const json* metadata = member(body, "metadata")) {
    if (!metadata->is_object() || metadata->size() > 16) refuse_field("metadata", "'metadata' must be an object of up to 16 strings");
    for (const auto& [key, value] : metadata->items()) {
      if (!value.is_string() || key.size() > 64 || value.get<std::string>().size() > 512) {
        refuse_field("metadata", "metadata holds strings of up to 512 characters under keys of up to 64");
      }
    }
    echo["metadata"] = *metadata;
  }
  auto request = parse_completion_request(Endpoint::chat, chat.dump());
  if (auto* error = std::get_if<ApiError>(&request)) {
    ApiError e = *error;
    if (e.param == "max_tokens") e.param = "max_output_tokens";
    else if (e.param == "messages") e.param = "input";
    else if (e.param == "response_format") e.param = "text";
    else if (e.param == "chat_template_kwargs") e.param = "reasoning";
    throw RequestFieldError{e};
  }
  out.request = std::move(std::get<CompletionRequest>(request));
  out.request.endpoint = Endpoint::responses;
  out.input_json = items.dump();
  out.context_json = context.dump();
  out.echo_json = echo.dump();
  return out;
}

}  // namespace

std::variant<ResponsesRequest, ApiError> parse_responses_request(const std::string& body, const ResponseHistory& history) {
  auto object = parse_json_object<json>(body);
  if (auto* error = std::get_if<ApiError>(&object)) return *error;
  try {
    return build(std::get<json>(object), history);
  } catch (const RequestFieldError& failure) {
    return failure.error;
  }
}

}  // namespace ds
