#pragma once
// Internal to the server (api_server.cpp and generation.cpp): what a
// request is once prepared off the I/O threads, handed to Server::start.

#include <optional>
#include <string>
#include <vector>

#include "server/api_server.h"
#include "server/completion_request.h"

namespace ds {

struct Server::Prepared {
  std::shared_ptr<ModelVersion> version;  // the one that tokenized it, and will run it
  CompletionRequest request;
  std::vector<int32_t> prompt;
  std::string prompt_text;
  std::optional<bool> reasoning_open;  // set for templates with reasoning: whether the prompt opened <think>
  ToolCallFormat tool_calls = ToolCallFormat::none;  // parse the reply's tool calls in this format
  // /v1/responses: what the Response object repeats and what is stored of the turn.
  struct ResponsesTurn {
    std::string previous_response_id, input_json, context_json, echo_json;
    bool store = false;
  };
  std::optional<ResponsesTurn> responses;
  // What the engine is asked for every choice (choice i samples with seed + i),
  // the output's constraint among them. max_tokens 0 with echo scores the
  // prompt only: one token is computed for it and not returned.
  GenerationParams params;
};

// The engine's parameters for a request: sampling, max_tokens (absent: to the
// context's end), stops, logprobs; a tenant's own prefix-cache salt.
GenerationParams generation_params(const CompletionRequest& request, const std::string& tenant);
// The field a refused request is refused for: max_tokens when it asked for a
// number the context cannot hold, else the prompt.
std::string refused_field(const CompletionRequest& request, const Admit& admit);

}  // namespace ds
