#include "server/openapi.h"

#include <nlohmann/json.hpp>

#include "base/version.h"

namespace ds {
namespace {

using json = nlohmann::json;

json ref(const std::string& name) { return {{"$ref", "#/components/schemas/" + name}}; }

json error_response(const std::string& description) {
  return {{"description", description}, {"content", {{"application/json", {{"schema", ref("Error")}}}}}};
}

json number(double low, double high) { return {{"type", "number"}, {"minimum", low}, {"maximum", high}, {"nullable", true}}; }

// Fields both generation endpoints take.
json sampling_properties() {
  return {{"model", {{"type", "string"}}},
          {"max_tokens", {{"type", "integer"}, {"minimum", 1}, {"nullable", true}}},
          {"max_completion_tokens", {{"type", "integer"}, {"minimum", 1}, {"nullable", true}}},
          {"temperature", number(0, 2)},
          {"top_p", number(0, 1)},
          {"top_k", {{"type", "integer"}, {"minimum", -1}, {"nullable", true}}},
          {"min_p", number(0, 1)},
          {"presence_penalty", number(-2, 2)},
          {"frequency_penalty", number(-2, 2)},
          {"repetition_penalty", number(0.01, 10)},
          {"stop", {{"nullable", true},
                    {"oneOf", json::array({{{"type", "string"}}, {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 16}}})}}},
          {"stop_token_ids", {{"type", "array"}, {"nullable", true}, {"maxItems", 64}, {"items", {{"type", "integer"}, {"minimum", 0}}}}},
          {"ignore_eos", {{"type", "boolean"}, {"nullable", true}}},
          {"seed", {{"type", "integer"}, {"nullable", true}}},
          {"n", {{"type", "integer"}, {"minimum", 1}, {"maximum", 16}, {"nullable", true}}},
          {"stream", {{"type", "boolean"}, {"nullable", true}}},
          {"stream_options", {{"type", "object"}, {"nullable", true}, {"additionalProperties", false},
                              {"properties", {{"include_usage", {{"type", "boolean"}, {"nullable", true}}}}}}},
          {"logit_bias", {{"type", "object"}, {"nullable", true}, {"maxProperties", 1024},
                          {"additionalProperties", {{"type", "number"}, {"minimum", -100}, {"maximum", 100}}}}},
          {"user", {{"type", "string"}, {"nullable", true}}},
          // Constrained output: JSON Schema or llama-server's GBNF (an unsupported keyword is a 400 naming it).
          {"response_format",
           {{"nullable", true},
            {"oneOf", json::array({{{"type", "object"},
                                    {"required", {"type"}},
                                    {"additionalProperties", false},
                                    {"properties", {{"type", {{"type", "string"}, {"enum", {"text", "json_object"}}}}}}},
                                   {{"type", "object"},
                                    {"required", {"type", "json_schema"}},
                                    {"additionalProperties", false},
                                    {"properties",
                                     {{"type", {{"type", "string"}, {"enum", {"json_schema"}}}},
                                      {"json_schema", {{"type", "object"},
                                                       {"required", {"name"}},
                                                       {"additionalProperties", false},
                                                       {"properties", {{"name", {{"type", "string"}}},
                                                                       {"description", {{"type", "string"}}},
                                                                       {"schema", {{"type", "object"}}},
                                                                       {"strict", {{"type", "boolean"}, {"nullable", true}}}}}}}}}}})}}},
          {"grammar", {{"type", "string"}, {"nullable", true}}}};
}

json usage_schema() {
  return {{"type", "object"},
          {"required", {"prompt_tokens", "completion_tokens", "total_tokens"}},
          {"properties",
           {{"prompt_tokens", {{"type", "integer"}}},
            {"completion_tokens", {{"type", "integer"}}},
            {"total_tokens", {{"type", "integer"}}},
            {"prompt_tokens_details", {{"type", "object"}, {"properties", {{"cached_tokens", {{"type", "integer"}}}}}}}}}};
}

// A stream of server-sent events (OpenAPI 3.2's itemSchema form): each event's
// data is one JSON chunk, and the last is the literal [DONE].
json sse_stream() {
  return {{"schema", {{"type", "string"}}},
          {"itemSchema", {{"type", "object"}, {"required", {"data"}}, {"properties", {{"data", {{"type", "string"}}}}}}}};
}

json generation_path(const std::string& summary, const std::string& request_schema, const std::string& response_schema) {
  return {{"post",
           {{"summary", summary},
            {"requestBody", {{"required", true}, {"content", {{"application/json", {{"schema", ref(request_schema)}}}}}}},
            {"responses",
             {{"200", {{"description", "The completion; with stream=true, server-sent events ending in 'data: [DONE]'"},
                       {"content", {{"application/json", {{"schema", ref(response_schema)}}},
                                    {"text/event-stream", sse_stream()}}}}},
              {"400", error_response("Invalid JSON or parameters (the message names the field), or context_length_exceeded")},
              {"401", error_response("Missing or unknown API key")},
              {"404", error_response("Unknown model")},
              {"405", error_response("Wrong method")},
              {"413", error_response("Body too large")},
              {"429", error_response("Rate limited; see Retry-After")},
              {"500", error_response("The engine failed (never caused by the request)")},
              {"503", error_response("Overloaded, loading or draining; see Retry-After")}}}}}};
}

// A POST that takes and returns JSON, answered off the I/O threads.
json json_post(const std::string& summary, const std::string& request_schema, const json& response_schema) {
  return {{"post",
           {{"summary", summary},
            {"requestBody", {{"required", true}, {"content", {{"application/json", {{"schema", ref(request_schema)}}}}}}},
            {"responses",
             {{"200", {{"description", "OK"}, {"content", {{"application/json", {{"schema", response_schema}}}}}}},
              {"400", error_response("Invalid JSON or fields (the message names the field), or context_length_exceeded")},
              {"401", error_response("Missing or unknown API key")},
              {"404", error_response("Unknown model")},
              {"405", error_response("Wrong method")},
              {"413", error_response("Body too large")},
              {"503", error_response("Overloaded; see Retry-After")}}}}}};
}

json simple_get(const std::string& summary, const json& schema, const std::string& content_type = "application/json") {
  return {{"get",
           {{"summary", summary},
            {"responses", {{"200", {{"description", "OK"}, {"content", {{content_type, {{"schema", schema}}}}}}},
                           {"401", error_response("Missing or unknown API key")},
                           {"503", {{"description", "Not ready"}, {"content", {{"application/json", {{"schema", {{"type", "object"}}}}}}}}}}}}}};
}

json build() {
  // additionalProperties false: an unknown field is a 400 naming it (completion_request.h).
  json chat_request = {{"type", "object"}, {"required", {"messages"}}, {"additionalProperties", false}, {"properties", sampling_properties()}};
  const json text = {{"type", "string"}};
  const json nullable_text = {{"type", "string"}, {"nullable", true}};
  const json tool_call = {{"type", "object"},
                          {"required", {"id", "function"}},
                          {"additionalProperties", false},
                          {"properties", {{"id", text},
                                          {"type", {{"type", "string"}, {"enum", {"function"}}}},
                                          {"function", {{"type", "object"},
                                                        {"required", {"name"}},
                                                        {"additionalProperties", false},
                                                        {"properties", {{"name", text}, {"arguments", nullable_text}}}}}}}};
  chat_request["properties"]["messages"] = {
      {"type", "array"},
      {"minItems", 1},
      {"items",
       {{"type", "object"},
        {"required", {"role"}},
        {"additionalProperties", false},
        {"properties",
         {{"role", {{"type", "string"}, {"enum", {"system", "developer", "user", "assistant", "tool"}}}},
          {"content", {{"nullable", true},
                       {"oneOf", json::array({{{"type", "string"}},
                                              {{"type", "array"},
                                               {"items", {{"type", "object"},
                                                          {"required", {"type", "text"}},
                                                          {"additionalProperties", false},
                                                          {"properties", {{"type", {{"type", "string"}, {"enum", {"text"}}}},
                                                                          {"text", {{"type", "string"}}}}}}}}})}}},
          {"name", nullable_text},
          {"tool_calls", {{"type", "array"}, {"nullable", true}, {"items", tool_call}}},
          {"tool_call_id", nullable_text},
          {"reasoning_content", nullable_text},
          {"refusal", {{"nullable", true}, {"enum", {nullptr}}}}}}}}};
  const json tools = {{"type", "array"},
                      {"nullable", true},
                      {"maxItems", 128},
                      {"items", {{"type", "object"},
                                 {"required", {"type", "function"}},
                                 {"additionalProperties", false},
                                 {"properties", {{"type", {{"type", "string"}, {"enum", {"function"}}}},
                                                 {"function", {{"type", "object"},
                                                               {"required", {"name"}},
                                                               {"additionalProperties", false},
                                                               {"properties", {{"name", {{"type", "string"}, {"pattern", "^[A-Za-z0-9_.-]{1,64}$"}}},
                                                                               {"description", nullable_text},
                                                                               {"parameters", {{"type", "object"}, {"nullable", true}}},
                                                                               {"strict", {{"type", "boolean"}, {"nullable", true}}}}}}}}}}}};
  chat_request["properties"]["tools"] = tools;
  chat_request["properties"]["tool_choice"] = {
      {"nullable", true},
      {"oneOf", json::array({{{"type", "string"}, {"enum", {"none", "auto", "required"}}},
                             {{"type", "object"},
                              {"required", {"type", "function"}},
                              {"properties", {{"type", {{"type", "string"}, {"enum", {"function"}}}},
                                              {"function", {{"type", "object"}, {"required", {"name"}}, {"properties", {{"name", text}}}}}}}}})}};
  chat_request["properties"]["parallel_tool_calls"] = {{"type", "boolean"}, {"nullable", true}};
  chat_request["properties"]["chat_template_kwargs"] = {{"type", "object"}, {"nullable", true}};
  chat_request["properties"]["add_generation_prompt"] = {{"type", "boolean"}, {"nullable", true}};
  chat_request["properties"]["logprobs"] = {{"type", "boolean"}, {"nullable", true}};
  chat_request["properties"]["top_logprobs"] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 20}, {"nullable", true}};

  json completion_request = {{"type", "object"}, {"required", {"prompt"}}, {"additionalProperties", false},
                             {"properties", sampling_properties()}};
  completion_request["properties"]["prompt"] = {
      {"oneOf", json::array({{{"type", "string"}},
                             {{"type", "array"}, {"items", {{"type", "integer"}, {"minimum", 0}}}, {"minItems", 1}},
                             {{"type", "array"}, {"items", {{"type", "string"}}}, {"minItems", 1}, {"maxItems", 1}},
                             {{"type", "array"}, {"minItems", 1}, {"maxItems", 1},
                              {"items", {{"type", "array"}, {"items", {{"type", "integer"}, {"minimum", 0}}}, {"minItems", 1}}}}})}};
  completion_request["properties"]["logprobs"] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 20}, {"nullable", true}};
  completion_request["properties"]["echo"] = {{"type", "boolean"}, {"nullable", true}};

  const json finish = {{"type", "string"}, {"nullable", true}, {"enum", {"stop", "length", "tool_calls", nullptr}}};
  json chat_response = {
      {"type", "object"},
      {"required", {"id", "object", "created", "model", "choices", "usage"}},
      {"properties",
       {{"id", {{"type", "string"}}},
        {"object", {{"type", "string"}, {"enum", {"chat.completion"}}}},
        {"created", {{"type", "integer"}}},
        {"model", {{"type", "string"}}},
        {"choices", {{"type", "array"},
                     {"items", {{"type", "object"},
                                {"required", {"index", "message", "finish_reason"}},
                                {"properties", {{"index", {{"type", "integer"}}},
                                                {"finish_reason", finish},
                                                {"logprobs", {{"type", "object"}, {"nullable", true}}},
                                                {"message", {{"type", "object"},
                                                             {"required", {"role", "content"}},
                                                             {"properties", {{"role", {{"type", "string"}}},
                                                                             {"content", nullable_text},
                                                                             {"tool_calls", {{"type", "array"}, {"items", tool_call}}},
                                                                             {"reasoning_content", {{"type", "string"}}}}}}}}}}}}},
        {"usage", usage_schema()}}}};
  json completion_response = {
      {"type", "object"},
      {"required", {"id", "object", "created", "model", "choices", "usage"}},
      {"properties",
       {{"id", {{"type", "string"}}},
        {"object", {{"type", "string"}, {"enum", {"text_completion"}}}},
        {"created", {{"type", "integer"}}},
        {"model", {{"type", "string"}}},
        {"choices", {{"type", "array"},
                     {"items", {{"type", "object"},
                                {"required", {"index", "text", "finish_reason"}},
                                {"properties", {{"index", {{"type", "integer"}}},
                                                {"text", {{"type", "string"}}},
                                                {"finish_reason", finish},
                                                {"logprobs", {{"type", "object"}, {"nullable", true}}}}}}}}},
        {"usage", usage_schema()}}}};
  const json error = {{"type", "object"},
                      {"required", {"error"}},
                      {"properties", {{"error", {{"type", "object"},
                                                 {"required", {"message", "type"}},
                                                 {"properties", {{"message", {{"type", "string"}}},
                                                                 {"type", {{"type", "string"}}},
                                                                 {"param", {{"type", "string"}, {"nullable", true}}},
                                                                 {"code", {{"type", "string"}, {"nullable", true}}}}}}}}}};
  const json models = {{"type", "object"},
                       {"required", {"object", "data"}},
                       {"properties", {{"object", {{"type", "string"}}},
                                       {"data", {{"type", "array"},
                                                 {"items", {{"type", "object"},
                                                            {"required", {"id", "object"}},
                                                            {"properties", {{"id", {{"type", "string"}}}, {"object", {{"type", "string"}}}}}}}}}}}};
  const json status = {{"type", "object"}, {"properties", {{"status", {{"type", "string"}}}}}};
  json message_schema = chat_request["properties"]["messages"];
  message_schema["nullable"] = true;
  const json token_ids = {{"type", "array"}, {"minItems", 1}, {"items", {{"type", "integer"}, {"minimum", 0}}}};
  const json embedding_request = {
      {"type", "object"},
      {"required", {"input"}},
      {"additionalProperties", false},
      {"properties", {{"model", {{"type", "string"}, {"nullable", true}}},
                      {"input", {{"oneOf", json::array({{{"type", "string"}, {"minLength", 1}},
                                                        {{"type", "array"}, {"minItems", 1}, {"maxItems", 256},
                                                         {"items", {{"type", "string"}, {"minLength", 1}}}},
                                                        token_ids,
                                                        {{"type", "array"}, {"minItems", 1}, {"maxItems", 256}, {"items", token_ids}}})}}},
                      {"encoding_format", {{"type", "string"}, {"enum", {"float", "base64"}}, {"nullable", true}}},
                      {"dimensions", {{"type", "integer"}, {"minimum", 1}, {"nullable", true}}},
                      {"user", {{"type", "string"}, {"nullable", true}}}}}};
  const json embedding_response = {
      {"type", "object"},
      {"required", {"object", "data", "model", "usage"}},
      {"properties", {{"object", {{"type", "string"}}},
                      {"data", {{"type", "array"},
                                {"items", {{"type", "object"},
                                           {"required", {"object", "index", "embedding"}},
                                           {"properties", {{"index", {{"type", "integer"}}},
                                                           {"embedding", {{"oneOf", json::array({{{"type", "array"}, {"items", {{"type", "number"}}}},
                                                                                                 {{"type", "string"}}})}}}}}}}}},
                      {"model", {{"type", "string"}}},
                      {"usage", {{"type", "object"}}}}}};
  json embeddings_path = json_post("Embeddings of the inputs: the final hidden state pooled (--embedding-pooling) and L2-normalised",
                                   "EmbeddingRequest", embedding_response);
  embeddings_path["post"]["responses"]["429"] = error_response("Rate limited; see Retry-After");
  embeddings_path["post"]["responses"]["500"] = error_response("The engine failed (never caused by the request)");
  const json tokenize_request = {
      {"type", "object"},
      {"additionalProperties", false},
      {"properties", {{"model", {{"type", "string"}, {"nullable", true}}},
                      {"prompt", {{"type", "string"}, {"nullable", true}}},
                      {"messages", message_schema},
                      {"tools", tools},
                      {"chat_template_kwargs", {{"type", "object"}, {"nullable", true}}},
                      {"add_special_tokens", {{"type", "boolean"}, {"nullable", true}}},
                      {"add_generation_prompt", {{"type", "boolean"}, {"nullable", true}}},
                      {"return_token_strs", {{"type", "boolean"}, {"nullable", true}}}}}};
  const json tokenize_response = {{"type", "object"},
                                  {"required", {"count", "max_model_len", "tokens"}},
                                  {"properties", {{"count", {{"type", "integer"}}},
                                                  {"max_model_len", {{"type", "integer"}}},
                                                  {"tokens", {{"type", "array"}, {"items", {{"type", "integer"}}}}},
                                                  {"token_strs", {{"type", "array"}, {"items", {{"type", "string"}}}}}}}};
  const json detokenize_request = {{"type", "object"},
                                   {"required", {"tokens"}},
                                   {"additionalProperties", false},
                                   {"properties", {{"model", {{"type", "string"}, {"nullable", true}}},
                                                   {"tokens", {{"type", "array"}, {"items", {{"type", "integer"}, {"minimum", 0}}}}}}}};
  const json detokenize_response = {{"type", "object"}, {"required", {"prompt"}}, {"properties", {{"prompt", {{"type", "string"}}}}}};
  const json model_object = models["properties"]["data"]["items"];
  json model_path = simple_get("One served model by id (404 for any other)", model_object);
  model_path["get"]["parameters"] = json::array({{{"name", "model"}, {"in", "path"}, {"required", true}, {"schema", {{"type", "string"}}}}});
  model_path["get"]["responses"]["404"] = error_response("Unknown model");
  return {{"openapi", "3.0.3"},
          {"info", {{"title", "dsinfer"}, {"version", k_dsinfer_version}, {"description", "OpenAI-compatible API of the dsinfer inference server"}}},
          {"components",
           {{"schemas", {{"ChatCompletionRequest", chat_request}, {"CompletionRequest", completion_request},
                         {"ChatCompletion", chat_response}, {"Completion", completion_response}, {"Error", error},
                         {"TokenizeRequest", tokenize_request}, {"DetokenizeRequest", detokenize_request},
                         {"EmbeddingRequest", embedding_request}}},
            {"securitySchemes", {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}}}}}},
          {"paths",
           {{"/v1/chat/completions", generation_path("Chat completion", "ChatCompletionRequest", "ChatCompletion")},
            {"/v1/completions", generation_path("Text completion", "CompletionRequest", "Completion")},
            {"/v1/models", simple_get("The served model", models)},
            {"/v1/models/{model}", model_path},
            {"/tokenize", json_post("Token ids of a prompt or of chat messages (vLLM's shape)", "TokenizeRequest", tokenize_response)},
            {"/v1/embeddings", embeddings_path},
            {"/detokenize", json_post("The text of token ids (vLLM's shape)", "DetokenizeRequest", detokenize_response)},
            {"/version", simple_get("The server's version", {{"type", "object"}, {"required", {"version"}},
                                                            {"properties", {{"version", {{"type", "string"}}}}}})},
            {"/health", simple_get("Alive", status)},
            {"/ready", simple_get("Loaded, warmed up and not draining", status)},
            {"/metrics", simple_get("Prometheus metrics", {{"type", "string"}}, "text/plain")},
            {"/openapi.json", simple_get("This document", {{"type", "object"}})}}}};
}

}  // namespace

const std::string& openapi_spec() {
  static const std::string spec = build().dump(2);
  return spec;
}

}  // namespace ds
