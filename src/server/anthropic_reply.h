#pragma once
// Anthropic's Messages reply, built as the engine's text arrives: content
// blocks (thinking, text, tool_use) in the order the model wrote them, either
// as the stream's events (message_start, ping, content_block_start /
// content_block_delta with thinking_delta, text_delta or input_json_delta /
// content_block_stop, message_delta with stop_reason and usage,
// message_stop) or gathered into one message.

#include <nlohmann/json.hpp>
#include <string>

#include "engine/request.h"
#include "server/api_error.h"

namespace ds {

class AnthropicReply {
 public:
  // omit_thinking (thinking.display omitted): a thinking block is written, its text is not.
  AnthropicReply(std::string id, std::string model, bool stream, bool omit_thinking)
      : id_(std::move(id)), model_(std::move(model)), stream_(stream), omit_thinking_(omit_thinking) {}

  // Each returns the server-sent events to write now: nothing unless streaming.
  std::string start(int32_t input_tokens);
  std::string thinking(const std::string& text);
  std::string text(const std::string& text);
  // A call's arguments, JSON text as the model wrote it, become the block's input.
  std::string tool_use(const std::string& name, const std::string& arguments);
  std::string finish(const std::string& stop_reason, const std::string& stop_sequence, const RequestMetrics& metrics);

  // The whole message, for a reply not streamed.
  nlohmann::json message(const std::string& stop_reason, const std::string& stop_sequence, const RequestMetrics& metrics) const;
  bool made_tool_calls() const { return tool_calls_ > 0; }

  // An error that ends a stream, as Anthropic writes it.
  static std::string error_event(const ApiError& error);

 private:
  std::string add(const std::string& type, const std::string& text);
  std::string close_block();

  std::string id_, model_;
  bool stream_, omit_thinking_;
  nlohmann::json blocks_ = nlohmann::json::array();
  bool open_ = false;  // streaming: the last block has not been stopped
  int tool_calls_ = 0;
};

// stop_reason for how a reply ended: end_turn, stop_sequence (with the
// string), max_tokens, tool_use.
std::string anthropic_stop_reason(FinishReason finish, const std::string& stop_string, bool made_tool_calls);

}  // namespace ds
