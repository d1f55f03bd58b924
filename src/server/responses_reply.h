#pragma once
// The Response object of POST /v1/responses, built as the engine's text
// arrives: output items (reasoning, message with output_text, function_call)
// in the order the model wrote them, either as the stream's events
// (response.created, response.in_progress, response.output_item.added /
// .done, response.content_part.added / .done, response.output_text.delta /
// .done, response.reasoning_text.delta / .done,
// response.function_call_arguments.delta / .done, and response.completed or
// response.incomplete, each with its sequence_number) or gathered into one.

#include <nlohmann/json.hpp>
#include <string>

#include "engine/request.h"
#include "server/api_error.h"

namespace ds {

class ResponsesReply {
 public:
  // echo_json: the request's settings the object repeats (responses_request.h).
  ResponsesReply(std::string id, std::string model, const std::string& echo_json, const std::string& previous_response_id, bool store,
                 bool stream);

  // Each returns the server-sent events to write now: nothing unless streaming.
  std::string start();
  std::string reasoning(const std::string& text);
  std::string text(const std::string& text);
  std::string function_call(const std::string& name, const std::string& arguments);
  // The last events, with the object as it ended (completed, or incomplete at max_output_tokens).
  std::string finish(FinishReason finish, const RequestMetrics& metrics);

  // The object as it ended, after finish().
  const nlohmann::ordered_json& response() const { return response_; }
  // The output items, for the stored history.
  const nlohmann::ordered_json& output() const { return response_["output"]; }
  // The error that ends a stream (response.failed), as OpenAI writes it.
  std::string failed(const ApiError& error);

 private:
  std::string event(const std::string& type, nlohmann::ordered_json data);
  std::string close_item();
  std::string add(const std::string& type, const std::string& text);

  bool stream_;
  nlohmann::ordered_json response_;
  bool open_ = false;  // the last output item has not been closed
  int64_t sequence_ = 0;
};

}  // namespace ds
