#include "server/responses_reply.h"

#include <chrono>
#include <random>

namespace ds {
namespace {

using json = nlohmann::ordered_json;

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char id[48];
  std::snprintf(id, sizeof id, "%s_%016llx%08llx", prefix, (unsigned long long)random(), (unsigned long long)(random() & 0xffffffffu));
  return id;
}

json usage_of(const RequestMetrics& m) {
  return {{"input_tokens", m.n_prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", m.n_cached_prompt_tokens}}},
          {"output_tokens", m.n_output_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", m.n_prompt_tokens + m.n_output_tokens}};
}

}  // namespace

ResponsesReply::ResponsesReply(std::string id, std::string model, const std::string& echo_json, const std::string& previous_response_id,
                               bool store, bool stream)
    : stream_(stream) {
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const json echo = json::parse(echo_json);
  response_ = {{"id", std::move(id)},
               {"object", "response"},
               {"created_at", now},
               {"status", "in_progress"},
               {"error", nullptr},
               {"incomplete_details", nullptr},
               {"instructions", echo.value("instructions", json())},
               {"max_output_tokens", echo.value("max_output_tokens", json())},
               {"model", std::move(model)},
               {"output", json::array()},
               {"parallel_tool_calls", echo.value("parallel_tool_calls", json(true))},
               {"previous_response_id", previous_response_id.empty() ? json() : json(previous_response_id)},
               {"store", store},
               {"temperature", echo.value("temperature", json(1.0))},
               {"text", echo.value("text", json{{"format", {{"type", "text"}}}})},
               {"tool_choice", echo.value("tool_choice", json("auto"))},
               {"tools", echo.value("tools", json::array())},
               {"top_p", echo.value("top_p", json(1.0))},
               {"truncation", "disabled"},
               {"usage", nullptr},
               {"user", echo.value("user", json())},
               {"metadata", echo.value("metadata", json::object())}};
}

std::string ResponsesReply::event(const std::string& type, json data) {
  if (!stream_) return {};
  json e = {{"type", type}, {"sequence_number", sequence_++}};
  e.update(data);
  return "event: " + type + "\ndata: " + e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string ResponsesReply::start() {
  std::string out = event("response.created", {{"response", response_}});  // in sequence: one statement each
  return out + event("response.in_progress", {{"response", response_}});
}

// The open item's last events: its text done, its part done, the item done.
std::string ResponsesReply::close_item() {
  if (!open_) return {};
  open_ = false;
  json& item = response_["output"].back();
  item["status"] = "completed";
  const size_t index = response_["output"].size() - 1;
  const json where = {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}};
  std::string out;
  if (item["type"] == "message") {
    json done = where;
    done["text"] = item["content"][0]["text"];
    done["logprobs"] = json::array();
    out += event("response.output_text.done", done);
    json part = where;
    part["part"] = item["content"][0];
    out += event("response.content_part.done", part);
  } else if (item["type"] == "reasoning") {
    json done = where;
    done["text"] = item["content"][0]["text"];
    out += event("response.reasoning_text.done", done);
  }
  return out + event("response.output_item.done", {{"output_index", index}, {"item", item}});
}

// Text of a reasoning or a message item: to the open one of that type, else to a new one.
std::string ResponsesReply::add(const std::string& type, const std::string& text) {
  if (text.empty()) return {};
  json& output = response_["output"];
  std::string out;
  if (output.empty() || output.back()["type"] != type || !open_) {
    out += close_item();
    const json part = type == "message" ? json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}
                                        : json{{"type", "reasoning_text"}, {"text", ""}};
    json item = type == "message" ? json{{"type", "message"}, {"id", random_id("msg")}, {"status", "in_progress"}, {"role", "assistant"},
                                         {"content", json::array()}}
                                  : json{{"type", "reasoning"}, {"id", random_id("rs")}, {"summary", json::array()},
                                         {"content", json::array()}, {"status", "in_progress"}};
    output.push_back(item);
    open_ = true;
    const size_t index = output.size() - 1;
    out += event("response.output_item.added", {{"output_index", index}, {"item", item}});
    output.back()["content"].push_back(part);
    if (type == "message") out += event("response.content_part.added", {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  }
  json& item = output.back();
  item["content"][0]["text"].get_ref<std::string&>() += text;  // in place: a long reply is not copied per token
  const json where = {{"item_id", item["id"]}, {"output_index", output.size() - 1}, {"content_index", 0}, {"delta", text}};
  if (type == "message") {
    json delta = where;
    delta["logprobs"] = json::array();
    return out + event("response.output_text.delta", delta);
  }
  return out + event("response.reasoning_text.delta", where);
}

std::string ResponsesReply::reasoning(const std::string& text) { return add("reasoning", text); }
std::string ResponsesReply::text(const std::string& text) { return add("message", text); }

std::string ResponsesReply::function_call(const std::string& name, const std::string& arguments) {
  std::string out = close_item();
  json item = {{"type", "function_call"}, {"id", random_id("fc")}, {"call_id", random_id("call")}, {"name", name},
               {"arguments", ""}, {"status", "in_progress"}};
  json& output = response_["output"];
  const size_t index = output.size();
  out += event("response.output_item.added", {{"output_index", index}, {"item", item}});
  out += event("response.function_call_arguments.delta", {{"item_id", item["id"]}, {"output_index", index}, {"delta", arguments}});
  out += event("response.function_call_arguments.done", {{"item_id", item["id"]}, {"output_index", index}, {"arguments", arguments}});
  item["arguments"] = arguments;
  item["status"] = "completed";
  output.push_back(item);
  return out + event("response.output_item.done", {{"output_index", index}, {"item", item}});
}

std::string ResponsesReply::finish(FinishReason finish, const RequestMetrics& metrics) {
  std::string out = close_item();
  response_["usage"] = usage_of(metrics);
  if (finish == FinishReason::length) {
    response_["status"] = "incomplete";
    response_["incomplete_details"] = {{"reason", "max_output_tokens"}};
    return out + event("response.incomplete", {{"response", response_}});
  }
  response_["status"] = "completed";
  return out + event("response.completed", {{"response", response_}});
}

std::string ResponsesReply::failed(const ApiError& error) {
  std::string out = close_item();
  response_["status"] = "failed";
  response_["error"] = {{"code", error.code.empty() ? "server_error" : error.code}, {"message", error.message}};
  return out + event("response.failed", {{"response", response_}});
}

}  // namespace ds
