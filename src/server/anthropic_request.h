#pragma once
// The body of Anthropic's POST /v1/messages (and /v1/messages/count_tokens),
// checked against Anthropic's shapes and made into the chat request the
// engine serves, so that both APIs share one path (template, tools, grammar,
// admission). Every refusal names the Anthropic field; what dsinfer does not
// do (images, documents, server tools, citations, redacted thinking, beta
// features) is refused by name, never dropped.
//
//   system                      -> a system message first
//   user text / tool_result     -> user messages / tool messages (is_error: the
//                                  result's text after "Error: ")
//   assistant text / tool_use / thinking -> content / tool_calls / reasoning_content
//   tools (name, description, input_schema) -> functions
//   tool_choice auto/any/tool/none, disable_parallel_tool_use
//                               -> auto/required/named/none, parallel_tool_calls
//   thinking enabled/disabled   -> the template's `thinking` and `enable_thinking`
//                                  (and `thinking_budget`: budget_tokens)
//   stop_sequences, temperature (0..1), top_p, top_k, max_tokens, stream
//   metadata.user_id            -> the access log's user (never a tenant: the key decides)
//   cache_control on a block    -> accepted: the prefix cache reuses every shared prefix anyway

#include <string>
#include <variant>

#include "server/api_error.h"
#include "server/completion_request.h"

namespace ds {

// count_tokens: the fields that shape a prompt (no max_tokens, no sampling).
std::variant<CompletionRequest, ApiError> parse_anthropic_request(const std::string& body, bool count_tokens);

// The error as Anthropic reports it: {"type": "error", "error": {"type", "message"}}.
std::string anthropic_error_json(const ApiError& error);

}  // namespace ds
