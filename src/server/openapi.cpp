#include "server/openapi.h"

#include <nlohmann/json.hpp>

#include "base/version.h"

// The schemas are JSON text parsed once at the first request, composed by the
// functions below where two endpoints share a part. (Written as nested
// nlohmann initializer lists, this file took a minute to compile, two under
// the sanitizers.)

namespace ds {
namespace {

using json = nlohmann::json;

json parse(const char* text) { return json::parse(text); }

json ref(const std::string& name) { return {{"$ref", "#/components/schemas/" + name}}; }

json error_response(const std::string& description, const std::string& schema = "Error") {
  json response = parse(R"({"content": {"application/json": {"schema": {}}}})");
  response["description"] = description;
  response["content"]["application/json"]["schema"] = ref(schema);
  return response;
}

// Fields both generation endpoints take. response_format: JSON Schema; grammar:
// llama-server's GBNF (an unsupported keyword is a 400 naming it).
json sampling_properties() {
  return parse(R"({
    "model": {"type": "string"},
    "max_tokens": {"type": "integer", "minimum": 1, "nullable": true},
    "max_completion_tokens": {"type": "integer", "minimum": 1, "nullable": true},
    "temperature": {"type": "number", "minimum": 0.0, "maximum": 2.0, "nullable": true},
    "top_p": {"type": "number", "minimum": 0.0, "maximum": 1.0, "nullable": true},
    "top_k": {"type": "integer", "minimum": -1, "nullable": true},
    "min_p": {"type": "number", "minimum": 0.0, "maximum": 1.0, "nullable": true},
    "presence_penalty": {"type": "number", "minimum": -2.0, "maximum": 2.0, "nullable": true},
    "frequency_penalty": {"type": "number", "minimum": -2.0, "maximum": 2.0, "nullable": true},
    "repetition_penalty": {"type": "number", "minimum": 0.01, "maximum": 10.0, "nullable": true},
    "stop": {"nullable": true,
             "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 16}]},
    "stop_token_ids": {"type": "array", "nullable": true, "maxItems": 64, "items": {"type": "integer", "minimum": 0}},
    "ignore_eos": {"type": "boolean", "nullable": true},
    "seed": {"type": "integer", "nullable": true},
    "n": {"type": "integer", "minimum": 1, "maximum": 16, "nullable": true},
    "stream": {"type": "boolean", "nullable": true},
    "stream_options": {"type": "object", "nullable": true, "additionalProperties": false,
                       "properties": {"include_usage": {"type": "boolean", "nullable": true}}},
    "logit_bias": {"type": "object", "nullable": true, "maxProperties": 1024,
                   "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
    "user": {"type": "string", "nullable": true},
    "response_format": {
      "nullable": true,
      "oneOf": [
        {"type": "object", "required": ["type"], "additionalProperties": false,
         "properties": {"type": {"type": "string", "enum": ["text", "json_object"]}}},
        {"type": "object", "required": ["type", "json_schema"], "additionalProperties": false,
         "properties": {
           "type": {"type": "string", "enum": ["json_schema"]},
           "json_schema": {"type": "object", "required": ["name"], "additionalProperties": false,
                           "properties": {"name": {"type": "string"},
                                          "description": {"type": "string"},
                                          "schema": {"type": "object"},
                                          "strict": {"type": "boolean", "nullable": true}}}}}]},
    "grammar": {"type": "string", "nullable": true}
  })");
}

json usage_schema() {
  return parse(R"({
    "type": "object",
    "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {"prompt_tokens": {"type": "integer"},
                   "completion_tokens": {"type": "integer"},
                   "total_tokens": {"type": "integer"},
                   "prompt_tokens_details": {"type": "object", "properties": {"cached_tokens": {"type": "integer"}}}}
  })");
}

// The responses every JSON POST may give besides 200.
json post_errors() {
  json errors;
  errors["400"] = error_response("Invalid JSON or fields (the message names the field), or context_length_exceeded");
  errors["401"] = error_response("Missing or unknown API key");
  errors["404"] = error_response("Unknown model");
  errors["405"] = error_response("Wrong method");
  errors["413"] = error_response("Body too large");
  errors["503"] = error_response("Overloaded; see Retry-After");
  return errors;
}

json json_body(const std::string& request_schema) {
  json body = parse(R"({"required": true, "content": {"application/json": {"schema": {}}}})");
  body["content"]["application/json"]["schema"] = ref(request_schema);
  return body;
}

json generation_path(const std::string& summary, const std::string& request_schema, const std::string& response_schema) {
  json post;
  post["summary"] = summary;
  post["requestBody"] = json_body(request_schema);
  // A stream of server-sent events (OpenAPI 3.2's itemSchema form): each event's
  // data is one JSON chunk, and the last is the literal [DONE].
  json ok = parse(R"({
    "description": "The completion; with stream=true, server-sent events ending in 'data: [DONE]'",
    "content": {"application/json": {"schema": {}},
                "text/event-stream": {"schema": {"type": "string"},
                                      "itemSchema": {"type": "object", "required": ["data"],
                                                     "properties": {"data": {"type": "string"}}}}}
  })");
  ok["content"]["application/json"]["schema"] = ref(response_schema);
  post["responses"] = post_errors();
  post["responses"]["200"] = ok;
  post["responses"]["400"] = error_response("Invalid JSON or parameters (the message names the field), or context_length_exceeded");
  post["responses"]["429"] = error_response("Rate limited; see Retry-After");
  post["responses"]["500"] = error_response("The engine failed (never caused by the request)");
  post["responses"]["503"] = error_response("Overloaded, loading or draining; see Retry-After");
  return {{"post", post}};
}

// A POST that takes and returns JSON, answered off the I/O threads.
json json_post(const std::string& summary, const std::string& request_schema, const json& response_schema) {
  json post;
  post["summary"] = summary;
  post["requestBody"] = json_body(request_schema);
  post["responses"] = post_errors();
  post["responses"]["200"] = parse(R"({"description": "OK", "content": {"application/json": {"schema": {}}}})");
  post["responses"]["200"]["content"]["application/json"]["schema"] = response_schema;
  return {{"post", post}};
}

json simple_get(const std::string& summary, const json& schema, const std::string& content_type = "application/json") {
  json get;
  get["summary"] = summary;
  get["responses"]["200"]["description"] = "OK";
  get["responses"]["200"]["content"][content_type]["schema"] = schema;
  get["responses"]["401"] = error_response("Missing or unknown API key");
  get["responses"]["503"] = parse(R"({"description": "Not ready", "content": {"application/json": {"schema": {"type": "object"}}}})");
  return {{"get", get}};
}

json tool_call_schema() {
  return parse(R"({
    "type": "object", "required": ["id", "function"], "additionalProperties": false,
    "properties": {"id": {"type": "string"},
                   "type": {"type": "string", "enum": ["function"]},
                   "function": {"type": "object", "required": ["name"], "additionalProperties": false,
                                "properties": {"name": {"type": "string"},
                                               "arguments": {"type": "string", "nullable": true}}}}
  })");
}

json messages_schema() {
  json messages = parse(R"({
    "type": "array", "minItems": 1,
    "items": {
      "type": "object", "required": ["role"], "additionalProperties": false,
      "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"nullable": true,
                    "oneOf": [{"type": "string"},
                              {"type": "array",
                               "items": {"type": "object", "required": ["type", "text"], "additionalProperties": false,
                                         "properties": {"type": {"type": "string", "enum": ["text"]},
                                                        "text": {"type": "string"}}}}]},
        "name": {"type": "string", "nullable": true},
        "tool_calls": {"type": "array", "nullable": true, "items": {}},
        "tool_call_id": {"type": "string", "nullable": true},
        "reasoning_content": {"type": "string", "nullable": true},
        "refusal": {"nullable": true, "enum": [null]}}}
  })");
  messages["items"]["properties"]["tool_calls"]["items"] = tool_call_schema();
  return messages;
}

json tools_schema() {
  return parse(R"({
    "type": "array", "nullable": true, "maxItems": 128,
    "items": {
      "type": "object", "required": ["type", "function"], "additionalProperties": false,
      "properties": {
        "type": {"type": "string", "enum": ["function"]},
        "function": {"type": "object", "required": ["name"], "additionalProperties": false,
                     "properties": {"name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
                                    "description": {"type": "string", "nullable": true},
                                    "parameters": {"type": "object", "nullable": true},
                                    "strict": {"type": "boolean", "nullable": true}}}}}
  })");
}

// additionalProperties false on every request: an unknown field is a 400 naming it (completion_request.h).
json chat_request_schema() {
  json request = parse(R"({"type": "object", "required": ["messages"], "additionalProperties": false})");
  request["properties"] = sampling_properties();
  request["properties"].update(parse(R"({
    "tool_choice": {"nullable": true,
                    "oneOf": [{"type": "string", "enum": ["none", "auto", "required"]},
                              {"type": "object", "required": ["type", "function"],
                               "properties": {"type": {"type": "string", "enum": ["function"]},
                                              "function": {"type": "object", "required": ["name"],
                                                           "properties": {"name": {"type": "string"}}}}}]},
    "parallel_tool_calls": {"type": "boolean", "nullable": true},
    "chat_template_kwargs": {"type": "object", "nullable": true},
    "add_generation_prompt": {"type": "boolean", "nullable": true},
    "logprobs": {"type": "boolean", "nullable": true},
    "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": true}
  })"));
  request["properties"]["messages"] = messages_schema();
  request["properties"]["tools"] = tools_schema();
  return request;
}

json completion_request_schema() {
  json request = parse(R"({"type": "object", "required": ["prompt"], "additionalProperties": false})");
  request["properties"] = sampling_properties();
  request["properties"].update(parse(R"({
    "prompt": {"oneOf": [{"type": "string"},
                         {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
                         {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 1},
                         {"type": "array", "minItems": 1, "maxItems": 1,
                          "items": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}}]},
    "logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": true},
    "echo": {"type": "boolean", "nullable": true}
  })"));
  return request;
}

// A generation's answer: `choice` holds the fields its choices have besides index, finish_reason and logprobs.
json generation_response_schema(const char* object, const json& choice_required, const json& choice) {
  json response = parse(R"({
    "type": "object",
    "required": ["id", "object", "created", "model", "choices", "usage"],
    "properties": {
      "id": {"type": "string"},
      "object": {"type": "string", "enum": []},
      "created": {"type": "integer"},
      "model": {"type": "string"},
      "choices": {"type": "array",
                  "items": {"type": "object", "required": ["index"],
                            "properties": {"index": {"type": "integer"},
                                           "finish_reason": {"type": "string", "nullable": true,
                                                             "enum": ["stop", "length", "tool_calls", null]},
                                           "logprobs": {"type": "object", "nullable": true}}}}}
  })");
  response["properties"]["object"]["enum"].push_back(object);
  json& items = response["properties"]["choices"]["items"];
  for (const json& field : choice_required) items["required"].push_back(field);
  items["required"].push_back("finish_reason");
  items["properties"].update(choice);
  response["properties"]["usage"] = usage_schema();
  return response;
}

json chat_response_schema() {
  json message = parse(R"({
    "type": "object", "required": ["role", "content"],
    "properties": {"role": {"type": "string"},
                   "content": {"type": "string", "nullable": true},
                   "tool_calls": {"type": "array", "items": {}},
                   "reasoning_content": {"type": "string"}}
  })");
  message["properties"]["tool_calls"]["items"] = tool_call_schema();
  return generation_response_schema("chat.completion", parse(R"(["message"])"), {{"message", message}});
}

json completion_response_schema() {
  return generation_response_schema("text_completion", parse(R"(["text"])"), parse(R"({"text": {"type": "string"}})"));
}

json embedding_request_schema() {
  return parse(R"({
    "type": "object", "required": ["input"], "additionalProperties": false,
    "properties": {
      "model": {"type": "string", "nullable": true},
      "input": {"oneOf": [{"type": "string", "minLength": 1},
                          {"type": "array", "minItems": 1, "maxItems": 256, "items": {"type": "string", "minLength": 1}},
                          {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
                          {"type": "array", "minItems": 1, "maxItems": 256,
                           "items": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}}]},
      "encoding_format": {"type": "string", "enum": ["float", "base64"], "nullable": true},
      "dimensions": {"type": "integer", "minimum": 1, "nullable": true},
      "user": {"type": "string", "nullable": true}}
  })");
}

json embeddings_path() {
  json path = json_post("Embeddings of the inputs: the final hidden state pooled (--embedding-pooling) and L2-normalised",
                        "EmbeddingRequest", parse(R"({
    "type": "object", "required": ["object", "data", "model", "usage"],
    "properties": {
      "object": {"type": "string"},
      "data": {"type": "array",
               "items": {"type": "object", "required": ["object", "index", "embedding"],
                         "properties": {"index": {"type": "integer"},
                                        "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}},
                                                                {"type": "string"}]}}}},
      "model": {"type": "string"},
      "usage": {"type": "object"}}
  })"));
  path["post"]["responses"]["429"] = error_response("Rate limited; see Retry-After");
  path["post"]["responses"]["500"] = error_response("The engine failed (never caused by the request)");
  return path;
}

json tokenize_request_schema() {
  json request = parse(R"({
    "type": "object", "additionalProperties": false,
    "properties": {"model": {"type": "string", "nullable": true},
                   "prompt": {"type": "string", "nullable": true},
                   "chat_template_kwargs": {"type": "object", "nullable": true},
                   "add_special_tokens": {"type": "boolean", "nullable": true},
                   "add_generation_prompt": {"type": "boolean", "nullable": true},
                   "return_token_strs": {"type": "boolean", "nullable": true}}
  })");
  request["properties"]["messages"] = messages_schema();
  request["properties"]["messages"]["nullable"] = true;
  request["properties"]["tools"] = tools_schema();
  return request;
}

// Anthropic's Messages API (server/anthropic_request.h): its request, reply and errors.
json anthropic_content_schema() {
  return parse(R"({"oneOf": [
    {"type": "string"},
    {"type": "array", "items": {"oneOf": [
      {"type": "object", "required": ["type", "text"], "additionalProperties": false,
       "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"},
                      "cache_control": {"type": "object"}}},
      {"type": "object", "required": ["type", "tool_use_id"], "additionalProperties": false,
       "properties": {"type": {"type": "string", "enum": ["tool_result"]}, "tool_use_id": {"type": "string"},
                      "content": {"type": "string"}, "is_error": {"type": "boolean"}, "cache_control": {"type": "object"}}},
      {"type": "object", "required": ["type", "id", "name", "input"], "additionalProperties": false,
       "properties": {"type": {"type": "string", "enum": ["tool_use"]}, "id": {"type": "string"}, "name": {"type": "string"},
                      "input": {"type": "object"}, "cache_control": {"type": "object"}}},
      {"type": "object", "required": ["type", "thinking"], "additionalProperties": false,
       "properties": {"type": {"type": "string", "enum": ["thinking"]}, "thinking": {"type": "string"},
                      "signature": {"type": "string"}}}]}}]})");
}

json anthropic_request_schema(bool count_tokens) {
  json request = parse(R"({
    "type": "object", "required": ["model", "messages"], "additionalProperties": false,
    "properties": {
      "model": {"type": "string"},
      "system": {"oneOf": [{"type": "string"},
                           {"type": "array", "items": {"type": "object", "required": ["type", "text"],
                                                       "properties": {"type": {"type": "string", "enum": ["text"]},
                                                                      "text": {"type": "string"}}}}]},
      "tools": {"type": "array", "maxItems": 128,
                "items": {"type": "object", "required": ["name", "input_schema"], "additionalProperties": false,
                          "properties": {"name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
                                         "description": {"type": "string"}, "input_schema": {"type": "object"},
                                         "cache_control": {"type": "object"}}}},
      "tool_choice": {"type": "object", "required": ["type"],
                      "properties": {"type": {"type": "string", "enum": ["auto", "any", "tool", "none"]},
                                     "name": {"type": "string"}, "disable_parallel_tool_use": {"type": "boolean"}}},
      "thinking": {"type": "object", "required": ["type"],
                   "properties": {"type": {"type": "string", "enum": ["enabled", "adaptive", "disabled"]},
                                  "budget_tokens": {"type": "integer", "minimum": 1024},
                                  "display": {"type": "string", "enum": ["summarized", "omitted"]}}},
      "output_config": {"type": "object", "additionalProperties": false,
                        "properties": {"format": {"type": "object", "required": ["type", "schema"],
                                                  "properties": {"type": {"type": "string", "enum": ["json_schema"]},
                                                                 "schema": {"type": "object"}}}}},
      "cache_control": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string", "enum": ["ephemeral"]}}}}
  })");
  json message = parse(R"({"type": "object", "required": ["role", "content"], "additionalProperties": false,
                           "properties": {"role": {"type": "string", "enum": ["user", "assistant"]}}})");
  message["properties"]["content"] = anthropic_content_schema();
  request["properties"]["messages"] = {{"type", "array"}, {"minItems", 1}, {"items", message}};
  if (count_tokens) return request;
  request["required"].push_back("max_tokens");
  request["properties"].update(parse(R"({
    "max_tokens": {"type": "integer", "minimum": 1},
    "stop_sequences": {"type": "array", "maxItems": 16, "items": {"type": "string", "minLength": 1}},
    "stream": {"type": "boolean"},
    "temperature": {"type": "number", "minimum": 0, "maximum": 1},
    "top_p": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1},
    "top_k": {"type": "integer", "minimum": 0},
    "metadata": {"type": "object", "additionalProperties": false, "properties": {"user_id": {"type": "string", "nullable": true}}}
  })"));
  return request;
}

json anthropic_post(const std::string& summary, const std::string& request_schema, const json& ok) {
  json post;
  post["summary"] = summary;
  post["requestBody"] = json_body(request_schema);
  for (const auto& [status, description] : {std::pair{"400", "Invalid JSON or fields (the message names the field)"},
                                            {"401", "Missing or unknown API key (x-api-key)"}, {"404", "Unknown model"},
                                            {"405", "Wrong method"}, {"413", "Body too large"}, {"429", "Rate limited; see Retry-After"},
                                            {"500", "The engine failed (never caused by the request)"},
                                            {"503", "Overloaded, loading or draining; see Retry-After"}}) {
    post["responses"][status] = error_response(description, "AnthropicError");
  }
  post["responses"]["200"] = ok;
  return {{"post", post}};
}

// OpenAI's Responses API (server/responses_request.h).
json responses_request_schema() {
  return parse(R"({
    "type": "object", "required": ["input"], "additionalProperties": false,
    "properties": {
      "model": {"type": "string"},
      "input": {"oneOf": [
        {"type": "string"},
        {"type": "array", "minItems": 1, "items": {"oneOf": [
          {"type": "object", "required": ["role", "content"], "additionalProperties": false,
           "properties": {"type": {"type": "string", "enum": ["message"]},
                          "role": {"type": "string", "enum": ["user", "assistant", "system", "developer"]},
                          "content": {"type": "string"}}},
          {"type": "object", "required": ["type", "call_id", "output"], "additionalProperties": false,
           "properties": {"type": {"type": "string", "enum": ["function_call_output"]}, "call_id": {"type": "string"},
                          "output": {"type": "string"}}}]}}]},
      "instructions": {"type": "string", "nullable": true},
      "previous_response_id": {"type": "string", "nullable": true},
      "tools": {"type": "array", "maxItems": 128,
                "items": {"type": "object", "required": ["type", "name"], "additionalProperties": false,
                          "properties": {"type": {"type": "string", "enum": ["function"]},
                                         "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
                                         "description": {"type": "string"}, "parameters": {"type": "object"},
                                         "strict": {"type": "boolean"}}}},
      "tool_choice": {"oneOf": [{"type": "string", "enum": ["none", "auto", "required"]},
                                {"type": "object", "required": ["type", "name"],
                                 "properties": {"type": {"type": "string", "enum": ["function"]}, "name": {"type": "string"}}}]},
      "parallel_tool_calls": {"type": "boolean", "nullable": true},
      "text": {"type": "object", "additionalProperties": false, "properties": {"format": {"type": "object"}}},
      "reasoning": {"type": "object", "additionalProperties": false,
                    "properties": {"effort": {"type": "string", "enum": ["none", "minimal", "low", "medium", "high", "xhigh"]}}},
      "max_output_tokens": {"type": "integer", "minimum": 1, "nullable": true},
      "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": true},
      "top_p": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1, "nullable": true},
      "stream": {"type": "boolean", "nullable": true},
      "store": {"type": "boolean", "nullable": true},
      "metadata": {"type": "object", "maxProperties": 16, "additionalProperties": {"type": "string", "maxLength": 512}},
      "user": {"type": "string", "nullable": true},
      "truncation": {"type": "string", "enum": ["disabled"]}}
  })");
}

json model_object_schema() {
  return parse(R"({"type": "object", "required": ["id", "object"],
                   "properties": {"id": {"type": "string"}, "object": {"type": "string"}}})");
}

json models_path() {
  json models = parse(R"({"type": "object", "required": ["object", "data"],
                          "properties": {"object": {"type": "string"}, "data": {"type": "array"}}})");
  models["properties"]["data"]["items"] = model_object_schema();
  return simple_get("The served model", models);
}

json model_path() {
  json path = simple_get("One served model by id (404 for any other)", model_object_schema());
  path["get"]["parameters"] = parse(R"([{"name": "model", "in": "path", "required": true, "schema": {"type": "string"}}])");
  path["get"]["responses"]["404"] = error_response("Unknown model");
  return path;
}

// An operation of the Files and Batch APIs (--store-dir; 404 for everything without it).
json store_operation(const std::string& summary, const json& ok, const std::string& content_type = "application/json") {
  json op;
  op["summary"] = summary;
  op["responses"]["200"]["description"] = "OK";
  op["responses"]["200"]["content"][content_type]["schema"] = ok;
  op["responses"]["400"] = error_response("Invalid fields or query parameters (the message names them)");
  op["responses"]["401"] = error_response("Missing or unknown API key");
  op["responses"]["404"] = error_response("No such file or batch of this tenant, or no --store-dir");
  op["responses"]["503"] = error_response("Overloaded; see Retry-After");
  return op;
}

void add_batch_api(json& paths, json& schemas) {
  schemas["File"] = parse(R"({"type": "object", "required": ["id", "object", "bytes", "created_at", "filename", "purpose"],
    "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["file"]}, "bytes": {"type": "integer"},
                   "created_at": {"type": "integer"}, "filename": {"type": "string"},
                   "purpose": {"type": "string", "enum": ["batch", "batch_output"]}, "status": {"type": "string"}}})");
  schemas["Batch"] = parse(R"({"type": "object", "required": ["id", "object", "endpoint", "input_file_id", "completion_window", "status",
                                                              "created_at", "request_counts"],
    "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["batch"]}, "endpoint": {"type": "string"},
                   "input_file_id": {"type": "string"}, "completion_window": {"type": "string"},
                   "status": {"type": "string", "enum": ["in_progress", "completed", "expired", "cancelling", "cancelled"]},
                   "output_file_id": {"type": "string", "nullable": true}, "error_file_id": {"type": "string", "nullable": true},
                   "created_at": {"type": "integer"}, "expires_at": {"type": "integer"},
                   "request_counts": {"type": "object", "required": ["total", "completed", "failed"],
                                      "properties": {"total": {"type": "integer"}, "completed": {"type": "integer"}, "failed": {"type": "integer"}}},
                   "metadata": {"type": "object", "nullable": true}}})");
  schemas["BatchRequest"] = parse(R"({"type": "object", "required": ["input_file_id", "endpoint", "completion_window"], "additionalProperties": false,
    "properties": {"input_file_id": {"type": "string"},
                   "endpoint": {"type": "string", "enum": ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]},
                   "completion_window": {"type": "string", "pattern": "^[1-9][0-9]{0,5}[smh]$",
                                         "description": "at most 24h; 24h is OpenAI's only value"},
                   "metadata": {"type": "object", "nullable": true, "maxProperties": 16,
                                "additionalProperties": {"type": "string", "maxLength": 512}}}})");
  const auto list_of = [](const std::string& schema) {
    json list = parse(R"({"type": "object", "required": ["object", "data", "has_more"],
      "properties": {"object": {"type": "string", "enum": ["list"]}, "data": {"type": "array"}, "has_more": {"type": "boolean"},
                     "first_id": {"type": "string", "nullable": true}, "last_id": {"type": "string", "nullable": true}}})");
    list["properties"]["data"]["items"] = ref(schema);
    return list;
  };
  const json id_parameter = parse(R"([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}])");
  const json deleted = parse(R"({"type": "object", "required": ["id", "deleted"],
                                 "properties": {"id": {"type": "string"}, "deleted": {"type": "boolean"}}})");

  json upload = store_operation("Uploads a JSONL file of batch requests (purpose batch; at most --max-body-bytes)", ref("File"));
  upload["requestBody"] = parse(R"({"required": true, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["purpose", "file"], "additionalProperties": false,
    "properties": {"purpose": {"type": "string", "enum": ["batch"]}, "file": {"type": "string", "format": "binary"}}}}}})");
  upload["responses"]["413"] = error_response("Body too large");
  json files = store_operation("This tenant's files, newest first", list_of("File"));
  files["parameters"] = parse(R"([
    {"name": "purpose", "in": "query", "schema": {"type": "string"}},
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000}},
    {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"]}},
    {"name": "after", "in": "query", "schema": {"type": "string"}}])");
  paths["/v1/files"] = {{"post", upload}, {"get", files}};
  json file = store_operation("A file of this tenant", ref("File"));
  file["parameters"] = id_parameter;
  json remove = store_operation("Deletes a file of this tenant", deleted);
  remove["parameters"] = id_parameter;
  paths["/v1/files/{id}"] = {{"get", file}, {"delete", remove}};
  json content = store_operation("A file's bytes", parse(R"({"type": "string", "format": "binary"})"), "application/octet-stream");
  content["parameters"] = id_parameter;
  paths["/v1/files/{id}/content"] = {{"get", content}};

  json create = store_operation("Creates a batch from an uploaded file; its lines run below every online request", ref("Batch"));
  create["requestBody"] = json_body("BatchRequest");
  json batches = store_operation("This tenant's batches, newest first", list_of("Batch"));
  batches["parameters"] = parse(R"([
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100}},
    {"name": "after", "in": "query", "schema": {"type": "string"}}])");
  paths["/v1/batches"] = {{"post", create}, {"get", batches}};
  json batch = store_operation("A batch of this tenant", ref("Batch"));
  batch["parameters"] = id_parameter;
  paths["/v1/batches/{id}"] = {{"get", batch}};
  json cancel = store_operation("Cancels an in_progress batch (409 for one that has ended)", ref("Batch"));
  cancel["parameters"] = id_parameter;
  cancel["responses"]["409"] = error_response("The batch has ended or is being cancelled");
  paths["/v1/batches/{id}/cancel"] = {{"post", cancel}};

  // What a created file or batch leads to (schemathesis follows these with the created id).
  const auto link_to = [](const char* operation) { return json{{"operationId", operation}, {"parameters", {{"id", "$response.body#/id"}}}}; };
  paths["/v1/files/{id}"]["get"]["operationId"] = "retrieveFile";
  paths["/v1/files/{id}"]["delete"]["operationId"] = "deleteFile";
  paths["/v1/files/{id}/content"]["get"]["operationId"] = "fileContent";
  paths["/v1/batches/{id}"]["get"]["operationId"] = "retrieveBatch";
  paths["/v1/batches/{id}/cancel"]["post"]["operationId"] = "cancelBatch";
  paths["/v1/files"]["post"]["responses"]["200"]["links"] = {
      {"RetrieveFile", link_to("retrieveFile")}, {"FileContent", link_to("fileContent")}, {"DeleteFile", link_to("deleteFile")}};
  paths["/v1/batches"]["post"]["responses"]["200"]["links"] = {{"RetrieveBatch", link_to("retrieveBatch")}, {"CancelBatch", link_to("cancelBatch")}};
}

json build() {
  json spec = parse(R"({
    "openapi": "3.0.3",
    "info": {"title": "dsinfer", "description": "OpenAI-compatible API of the dsinfer inference server"},
    "components": {
      "schemas": {
        "Error": {"type": "object", "required": ["error"],
                  "properties": {"error": {"type": "object", "required": ["message", "type"],
                                           "properties": {"message": {"type": "string"},
                                                          "type": {"type": "string"},
                                                          "param": {"type": "string", "nullable": true},
                                                          "code": {"type": "string", "nullable": true}}}}},
        "DetokenizeRequest": {"type": "object", "required": ["tokens"], "additionalProperties": false,
                              "properties": {"model": {"type": "string", "nullable": true},
                                             "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}}}}},
      "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
  })");
  spec["info"]["version"] = k_dsinfer_version;
  json& schemas = spec["components"]["schemas"];
  schemas["ChatCompletionRequest"] = chat_request_schema();
  schemas["CompletionRequest"] = completion_request_schema();
  schemas["ChatCompletion"] = chat_response_schema();
  schemas["Completion"] = completion_response_schema();
  schemas["TokenizeRequest"] = tokenize_request_schema();
  schemas["EmbeddingRequest"] = embedding_request_schema();
  schemas["MessagesRequest"] = anthropic_request_schema(false);
  schemas["CountTokensRequest"] = anthropic_request_schema(true);
  schemas["ResponsesRequest"] = responses_request_schema();
  schemas["Response"] = parse(R"({"type": "object", "required": ["id", "object", "created_at", "status", "output"],
    "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["response"]}, "created_at": {"type": "integer"},
                   "status": {"type": "string", "enum": ["completed", "incomplete", "failed", "in_progress"]},
                   "output": {"type": "array", "items": {"type": "object", "required": ["type"]}}, "usage": {"type": "object"}}})");
  schemas["AnthropicError"] = parse(R"({"type": "object", "required": ["type", "error"],
    "properties": {"type": {"type": "string", "enum": ["error"]},
                   "error": {"type": "object", "required": ["type", "message"],
                             "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}})");
  schemas["Message"] = parse(R"({"type": "object", "required": ["id", "type", "role", "model", "content", "stop_reason", "usage"],
    "properties": {"id": {"type": "string"}, "type": {"type": "string", "enum": ["message"]},
                   "role": {"type": "string", "enum": ["assistant"]}, "model": {"type": "string"},
                   "content": {"type": "array", "items": {"type": "object", "required": ["type"]}},
                   "stop_reason": {"type": "string", "enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use"]},
                   "stop_sequence": {"type": "string", "nullable": true},
                   "usage": {"type": "object", "required": ["input_tokens", "output_tokens"]}}})");

  const json status = parse(R"({"type": "object", "properties": {"status": {"type": "string"}}})");
  json& paths = spec["paths"];
  paths["/v1/chat/completions"] = generation_path("Chat completion", "ChatCompletionRequest", "ChatCompletion");
  paths["/v1/completions"] = generation_path("Text completion", "CompletionRequest", "Completion");
  paths["/v1/models"] = models_path();
  paths["/v1/models/{model}"] = model_path();
  paths["/tokenize"] = json_post("Token ids of a prompt or of chat messages (vLLM's shape)", "TokenizeRequest", parse(R"({
    "type": "object", "required": ["count", "max_model_len", "tokens"],
    "properties": {"count": {"type": "integer"},
                   "max_model_len": {"type": "integer"},
                   "tokens": {"type": "array", "items": {"type": "integer"}},
                   "token_strs": {"type": "array", "items": {"type": "string"}}}
  })"));
  paths["/v1/embeddings"] = embeddings_path();
  paths["/detokenize"] = json_post("The text of token ids (vLLM's shape)", "DetokenizeRequest",
                                   parse(R"({"type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}})"));
  json message_ok = parse(R"({
    "description": "The message; with stream=true, Anthropic's server-sent events, message_start to message_stop",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}},
                "text/event-stream": {"schema": {"type": "string"}}}
  })");
  paths["/v1/messages"] = anthropic_post("Anthropic's Messages API", "MessagesRequest", message_ok);
  json counted = parse(R"({"description": "OK", "content": {"application/json": {"schema": {
    "type": "object", "required": ["input_tokens"], "properties": {"input_tokens": {"type": "integer"}}}}}})");
  paths["/v1/messages/count_tokens"] = anthropic_post("The prompt tokens of a Messages request", "CountTokensRequest", counted);
  json response_ok = parse(R"({
    "description": "The Response; with stream=true, server-sent events, response.created to response.completed",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Response"}},
                "text/event-stream": {"schema": {"type": "string"}}}
  })");
  paths["/v1/responses"] = generation_path("OpenAI's Responses API (stored under --store-dir)", "ResponsesRequest", "Response");
  paths["/v1/responses"]["post"]["responses"]["200"] = response_ok;
  paths["/v1/responses"]["post"]["responses"]["404"] = error_response("Unknown model, or no stored previous_response_id of this tenant");
  json id_parameter = parse(R"([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}])");
  json stored = simple_get("A stored response of this tenant", ref("Response"));
  stored["get"]["parameters"] = id_parameter;
  stored["get"]["responses"]["404"] = error_response("No such stored response for this tenant");
  stored["delete"] = parse(R"({"summary": "Deletes a stored response of this tenant", "responses": {"200": {"description": "Deleted",
    "content": {"application/json": {"schema": {"type": "object", "required": ["id", "deleted"],
                                                "properties": {"id": {"type": "string"}, "deleted": {"type": "boolean"}}}}}}}})");
  stored["delete"]["parameters"] = id_parameter;
  stored["delete"]["responses"]["401"] = error_response("Missing or unknown API key");
  stored["delete"]["responses"]["404"] = error_response("No such stored response for this tenant");
  stored["delete"]["responses"]["503"] = error_response("Not ready");
  paths["/v1/responses/{id}"] = stored;
  json items = simple_get("The input items of a stored response", parse(R"({"type": "object", "required": ["object", "data"],
    "properties": {"object": {"type": "string"}, "data": {"type": "array"}, "has_more": {"type": "boolean"}}})"));
  items["get"]["parameters"] = id_parameter;
  items["get"]["responses"]["404"] = error_response("No such stored response for this tenant");
  paths["/v1/responses/{id}/input_items"] = items;
  add_batch_api(paths, schemas);
  paths["/version"] = simple_get("The server's version",
                                 parse(R"({"type": "object", "required": ["version"], "properties": {"version": {"type": "string"}}})"));
  paths["/health"] = simple_get("Alive", status);
  paths["/ready"] = simple_get("Loaded, warmed up and not draining", status);
  paths["/metrics"] = simple_get("Prometheus metrics", parse(R"({"type": "string"})"), "text/plain");
  paths["/openapi.json"] = simple_get("This document", parse(R"({"type": "object"})"));
  return spec;
}

}  // namespace

const std::string& openapi_spec() {
  static const std::string spec = build().dump(2);
  return spec;
}

}  // namespace ds
