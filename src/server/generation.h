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
  std::optional<grammar::TokenMatcher> grammar;     // the output's constraint, if any
  int64_t max_tokens = 0;
};

}  // namespace ds
