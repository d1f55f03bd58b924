#include "server/anthropic_reply.h"

#include <random>

#include "server/anthropic_request.h"

namespace ds {
namespace {

using json = nlohmann::json;

std::string event(const char* name, const json& data) {
  return std::string("event: ") + name + "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string tool_use_id() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char id[40];
  std::snprintf(id, sizeof id, "toolu_%016llx%08llx", (unsigned long long)random(), (unsigned long long)(random() & 0xffffffffu));
  return id;
}

// Anthropic counts a prompt's tokens read from its cache apart from the rest.
json usage_of(const RequestMetrics& m) {
  return {{"input_tokens", m.n_prompt_tokens - m.n_cached_prompt_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", m.n_cached_prompt_tokens},
          {"output_tokens", m.n_output_tokens}};
}

}  // namespace

std::string AnthropicReply::start(int32_t input_tokens) {
  if (!stream_) return {};
  // The cached share of the prompt is known when it has run: message_delta's usage says it.
  const json message = {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}, {"content", json::array()},
                        {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                        {"usage", {{"input_tokens", input_tokens}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0}, {"output_tokens", 0}}}};
  return event("message_start", {{"type", "message_start"}, {"message", message}}) + event("ping", {{"type", "ping"}});
}

std::string AnthropicReply::close_block() {
  if (!open_) return {};
  open_ = false;
  return event("content_block_stop", {{"type", "content_block_stop"}, {"index", blocks_.size() - 1}});
}

// Text of `type` (thinking or text): to the last block when it is of that type, else to a new one.
std::string AnthropicReply::add(const std::string& type, const std::string& text) {
  if (text.empty()) return {};
  const char* field = type == "thinking" ? "thinking" : "text";
  std::string out;
  if (blocks_.empty() || blocks_.back()["type"] != type || (stream_ && !open_)) {
    out += close_block();
    json block = {{"type", type}, {field, ""}};
    if (type == "thinking") block["signature"] = "";  // dsinfer does not sign its thinking
    blocks_.push_back(block);
    if (stream_) {
      out += event("content_block_start", {{"type", "content_block_start"}, {"index", blocks_.size() - 1}, {"content_block", block}});
      open_ = true;
    }
  }
  if (type == "thinking" && omit_thinking_) return out;
  blocks_.back()[field].get_ref<std::string&>() += text;  // in place: a long reply is not copied per token
  if (stream_) {
    const json delta = {{"type", type == "thinking" ? "thinking_delta" : "text_delta"}, {field, text}};
    out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", blocks_.size() - 1}, {"delta", delta}});
  }
  return out;
}

std::string AnthropicReply::thinking(const std::string& text) { return add("thinking", text); }
std::string AnthropicReply::text(const std::string& text) { return add("text", text); }

std::string AnthropicReply::tool_use(const std::string& name, const std::string& arguments) {
  const json input = json::parse(arguments.empty() ? "{}" : arguments, nullptr, false);
  // Arguments that are no JSON object stay visible as text rather than being dropped.
  if (!input.is_object()) return text(arguments);
  ++tool_calls_;
  std::string out = close_block();
  const json block = {{"type", "tool_use"}, {"id", tool_use_id()}, {"name", name}, {"input", input}};
  blocks_.push_back(block);
  if (!stream_) return out;
  json opened = block;
  opened["input"] = json::object();
  const size_t index = blocks_.size() - 1;
  out += event("content_block_start", {{"type", "content_block_start"}, {"index", index}, {"content_block", opened}});
  out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", index},
                                       {"delta", {{"type", "input_json_delta"}, {"partial_json", input.dump()}}}});
  out += event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
  return out;
}

std::string AnthropicReply::finish(const std::string& stop_reason, const std::string& stop_sequence, const RequestMetrics& metrics) {
  if (!stream_) return {};
  std::string out = close_block();
  const json delta = {{"stop_reason", stop_reason}, {"stop_sequence", stop_sequence.empty() ? json(nullptr) : json(stop_sequence)}};
  out += event("message_delta", {{"type", "message_delta"}, {"delta", delta}, {"usage", usage_of(metrics)}});
  out += event("message_stop", {{"type", "message_stop"}});
  return out;
}

json AnthropicReply::message(const std::string& stop_reason, const std::string& stop_sequence, const RequestMetrics& metrics) const {
  return {{"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_},
          {"content", blocks_},
          {"stop_reason", stop_reason},
          {"stop_sequence", stop_sequence.empty() ? json(nullptr) : json(stop_sequence)},
          {"usage", usage_of(metrics)}};
}

std::string AnthropicReply::error_event(const ApiError& error) {
  return "event: error\ndata: " + anthropic_error_json(error) + "\n\n";
}

std::string anthropic_stop_reason(FinishReason finish, const std::string& stop_string, bool made_tool_calls) {
  if (finish == FinishReason::length) return "max_tokens";
  if (made_tool_calls) return "tool_use";
  return stop_string.empty() ? "end_turn" : "stop_sequence";
}

}  // namespace ds
