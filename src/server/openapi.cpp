#include "server/openapi.h"

#include <nlohmann/json.hpp>

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
          {"seed", {{"type", "integer"}, {"nullable", true}}},
          {"n", {{"type", "integer"}, {"minimum", 1}, {"maximum", 1}, {"nullable", true}}},
          {"stream", {{"type", "boolean"}, {"nullable", true}}},
          {"stream_options", {{"type", "object"}, {"nullable", true}, {"additionalProperties", false},
                              {"properties", {{"include_usage", {{"type", "boolean"}, {"nullable", true}}}}}}},
          {"logit_bias", {{"type", "object"}, {"nullable", true}, {"maxProperties", 1024},
                          {"additionalProperties", {{"type", "number"}, {"minimum", -100}, {"maximum", 100}}}}},
          {"user", {{"type", "string"}, {"nullable", true}}}};
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
  chat_request["properties"]["messages"] = {
      {"type", "array"},
      {"minItems", 1},
      {"items",
       {{"type", "object"},
        {"required", {"role"}},
        {"additionalProperties", false},
        {"properties",
         {{"role", {{"type", "string"}, {"enum", {"system", "developer", "user", "assistant"}}}},
          {"content", {{"nullable", true},
                       {"oneOf", json::array({{{"type", "string"}},
                                              {{"type", "array"},
                                               {"items", {{"type", "object"},
                                                          {"required", {"type", "text"}},
                                                          {"additionalProperties", false},
                                                          {"properties", {{"type", {{"type", "string"}, {"enum", {"text"}}}},
                                                                          {"text", {{"type", "string"}}}}}}}}})}}}}}}}};
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

  const json finish = {{"type", "string"}, {"nullable", true}, {"enum", {"stop", "length", nullptr}}};
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
                                                                             {"content", {{"type", "string"}}},
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
  return {{"openapi", "3.0.3"},
          {"info", {{"title", "dsinfer"}, {"version", "0.1"}, {"description", "OpenAI-compatible API of the dsinfer inference server"}}},
          {"components",
           {{"schemas", {{"ChatCompletionRequest", chat_request}, {"CompletionRequest", completion_request},
                         {"ChatCompletion", chat_response}, {"Completion", completion_response}, {"Error", error}}},
            {"securitySchemes", {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}}}}}},
          {"paths",
           {{"/v1/chat/completions", generation_path("Chat completion", "ChatCompletionRequest", "ChatCompletion")},
            {"/v1/completions", generation_path("Text completion", "CompletionRequest", "Completion")},
            {"/v1/models", simple_get("The served model", models)},
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
