#pragma once
// The body of POST /v1/responses (OpenAI's Responses API), checked and made
// into the chat request the engine serves, as Anthropic's Messages are
// (server/anthropic_request.h): one path for template, tools, grammar and
// admission. Every refusal names the field.
//
//   input: a string, or items: messages (user, assistant, system, developer;
//          text parts), function_call, function_call_output, reasoning
//   instructions -> a system message first (not carried to the next turn)
//   previous_response_id -> the stored turn's history (server/response_store.h) before the input
//   tools (function) / tool_choice / parallel_tool_calls, text.format (text,
//   json_object, json_schema), max_output_tokens, temperature, top_p, stream,
//   store, metadata, user
//   reasoning.effort -> the template's thinking switch (none: off; any level: on)

#include <functional>
#include <optional>
#include <string>
#include <variant>

#include "server/api_error.h"
#include "server/completion_request.h"

namespace ds {

struct ResponsesRequest {
  CompletionRequest request;
  std::string previous_response_id;
  bool store = true;
  bool store_asked = false;  // `store` was given (true or false), not OpenAI's default
  std::string input_json;    // this request's input as items, each with an id
  std::string context_json;  // the history and the input: what the model sees, as items
  std::string echo_json;     // the request's settings the Response object repeats (instructions, tools, ...)
};

// `history(id)`: the stored context of a previous response of this tenant, nullopt when there is none.
using ResponseHistory = std::function<std::optional<std::string>(const std::string& id)>;
std::variant<ResponsesRequest, ApiError> parse_responses_request(const std::string& body, const ResponseHistory& history);

}  // namespace ds
