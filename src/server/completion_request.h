#pragma once
// The bodies of POST /v1/chat/completions and /v1/completions (and of the
// tokenizer endpoints, /tokenize and /detokenize), parsed and checked. Every rejection names the field; absent and null fields take
// OpenAI's defaults. Nothing is ignored: an unknown field, or one of OpenAI's
// that dsinfer does not implement (echo, suffix, ...), is a
// 400 naming it.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/sampler.h"
#include "server/api_error.h"
#include "server/chat_messages.h"

namespace ds {

// messages: Anthropic's /v1/messages; responses: OpenAI's /v1/responses: chat requests with their own replies
// (server/anthropic_request.h, server/responses_request.h).
enum class Endpoint { chat, completion, messages, responses };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;
  ChatConversation chat;               // chat: messages, tools, template kwargs
  std::string prompt_text;             // completion, as text ...
  std::vector<int32_t> prompt_tokens;  // ... or as token ids
  bool prompt_is_tokens = false;
  std::optional<int32_t> max_tokens;   // absent: up to the end of the context; 0 only with echo
  bool echo = false;                   // completions: the reply starts with the prompt (and its logprobs)
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // vLLM's extension: ids that end the reply, not output
  bool ignore_eos = false;  // vLLM's extension: the end-of-generation tokens do not end the reply (benchmarks)
  bool stream = false;
  bool include_usage = false;
  int32_t logprobs = -1;  // -1: none; otherwise how many alternatives per token
  int32_t n = 1;          // choices, each its own sequence (seed + i for choice i)
  std::string user;
  // Constrained output, as GBNF: from response_format (json_object,
  // json_schema) or llama-server's `grammar`; empty when unconstrained.
  std::string grammar;
  std::string grammar_field;  // which field asked for it, for errors
  bool omit_reasoning = false;  // Anthropic's thinking.display omitted: thinking blocks come back empty
};

// Deeper JSON is refused before parsing (a chat request needs about five levels).
constexpr int k_max_json_depth = 64;
// The body as a JSON object (Json: nlohmann::json or ordered_json), or the
// error that says why it is not one: nested too deep (refused before parsing), not JSON, not an object.
template <typename Json>
std::variant<Json, ApiError> parse_json_object(const std::string& body);
constexpr int k_max_logit_bias = 1024;  // entries of logit_bias
constexpr int k_max_choices = 16;       // n

std::variant<CompletionRequest, ApiError> parse_completion_request(Endpoint endpoint, const std::string& body);

// POST /tokenize (vLLM's shape): a prompt, or chat messages rendered with the
// model's template first.
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;  // else messages
  ChatConversation chat;
  bool add_special_tokens = true;     // BOS as the vocabulary asks (vLLM: default false for messages)
  bool return_token_strs = false;
};
std::variant<TokenizeRequest, ApiError> parse_tokenize_request(const std::string& body);

// POST /v1/embeddings (OpenAI's shape): input as a string, strings, token
// ids or lists of token ids; encoding_format float or base64.
struct EmbeddingRequest {
  std::string model;
  std::vector<std::string> texts;                 // or ...
  std::vector<std::vector<int32_t>> token_lists;  // ... token ids, one list per input
  bool base64 = false;
  std::optional<int64_t> dimensions;  // only the model's own width is accepted
};
constexpr size_t k_max_embedding_inputs = 256;
std::variant<EmbeddingRequest, ApiError> parse_embedding_request(const std::string& body);

// POST /detokenize: {"model"?, "tokens": [ids]}.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
std::variant<DetokenizeRequest, ApiError> parse_detokenize_request(const std::string& body);

}  // namespace ds
