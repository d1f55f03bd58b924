#include "server/completion_request.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>

#include "grammar/json_schema.h"

namespace ds {

std::string ApiError::json() const {
  nlohmann::json body = {{"error",
                          {{"message", message},
                           {"type", type},
                           {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                           {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// Whether arrays and objects nest deeper than `limit` anywhere in `text`
// (outside strings). One pass, no allocation: checked before a parser,
// which would otherwise build every level of "[[[[..." first.
bool nests_deeper_than(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

template <typename Json>
std::variant<Json, ApiError> parse_json_object(const std::string& body) {
  if (nests_deeper_than(body, k_max_json_depth)) {
    return ApiError::invalid("", "the request body nests arrays and objects deeper than " + std::to_string(k_max_json_depth) + " levels");
  }
  Json parsed = Json::parse(body, nullptr, false);
  if (parsed.is_discarded()) return ApiError::invalid("", "the request body is not valid JSON");
  if (!parsed.is_object()) return ApiError::invalid("", "the request body must be a JSON object");
  return parsed;
}
template std::variant<nlohmann::json, ApiError> parse_json_object<nlohmann::json>(const std::string&);
template std::variant<nlohmann::ordered_json, ApiError> parse_json_object<nlohmann::ordered_json>(const std::string&);


namespace {

using json = nlohmann::json;

// The request fields dsinfer honours, per endpoint (the sampling extensions
// vLLM and llama-server users send are among them: top_k, min_p,
// repetition_penalty).
const std::set<std::string> k_common_fields = {"model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
                                               "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "n",
                                               "stop", "stop_token_ids", "ignore_eos", "stream", "stream_options", "logprobs", "logit_bias",
                                               "user", "response_format", "grammar"};
const std::set<std::string> k_chat_fields = {"messages", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
                                             "chat_template_kwargs", "add_generation_prompt"};
const std::set<std::string> k_completion_fields = {"prompt", "echo"};
// Fields of OpenAI's chat and completions references that dsinfer does not
// implement yet: refused by name rather than ignored.
const std::set<std::string> k_unimplemented_fields = {
    "functions", "function_call",
    "audio", "modalities", "prediction", "reasoning_effort", "web_search_options", "service_tier", "store", "metadata",
    "suffix", "best_of", "verbosity", "prompt_cache_key", "safety_identifier"};

// The first key of `object` outside `allowed`, as an error naming it; a null
// value counts as absent only for fields dsinfer would take.
std::optional<ApiError> unknown_field(const json& object, const std::set<std::string>& allowed, const std::set<std::string>& also,
                                      const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    if (allowed.count(key) || also.count(key)) continue;
    const std::string name = where.empty() ? key : where + "." + key;
    if (k_unimplemented_fields.count(key) && where.empty()) {
      if (value.is_null()) continue;  // an explicit null asks for the default: nothing is being ignored
      return ApiError::invalid(key, "'" + key + "' is not supported by dsinfer (yet); remove it from the request");
    }
    return ApiError::invalid(name, "unknown field '" + name + "'");
  }
  return std::nullopt;
}


// Field readers: nullopt when absent or null, an ApiError when mistyped or out of range.
struct Reader {
  const json& body;
  std::optional<ApiError> error;

  const json* field(const char* name) {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  }
  void fail(const std::string& name, const std::string& message) {
    if (!error) error = ApiError::invalid(name, "'" + std::string(name) + "' " + message);
  }
  std::optional<double> number(const char* name, double low, double high) {
    const json* f = field(name);
    if (!f) return std::nullopt;
    if (!f->is_number()) return fail(name, "must be a number"), std::nullopt;
    const double v = f->get<double>();
    if (!(v >= low && v <= high)) {
      return fail(name, "must be between " + json(low).dump() + " and " + json(high).dump() + ", got " + f->dump()), std::nullopt;
    }
    return v;
  }
  std::optional<int64_t> integer(const char* name, int64_t low, int64_t high) {
    const json* f = field(name);
    if (!f) return std::nullopt;
    if (!f->is_number_integer()) return fail(name, "must be an integer"), std::nullopt;
    // Very large unsigned values do not fit int64: they are out of range too.
    if (f->is_number_unsigned() && f->get<uint64_t>() > uint64_t(high)) {
      return fail(name, "must be between " + std::to_string(low) + " and " + std::to_string(high)), std::nullopt;
    }
    const int64_t v = f->get<int64_t>();
    if (v < low || v > high) return fail(name, "must be between " + std::to_string(low) + " and " + std::to_string(high)), std::nullopt;
    return v;
  }
  std::optional<bool> boolean(const char* name) {
    const json* f = field(name);
    if (!f) return std::nullopt;
    if (!f->is_boolean()) return fail(name, "must be true or false"), std::nullopt;
    return f->get<bool>();
  }
  std::optional<std::string> string(const char* name) {
    const json* f = field(name);
    if (!f) return std::nullopt;
    if (!f->is_string()) return fail(name, "must be a string"), std::nullopt;
    return f->get<std::string>();
  }
};

// The conversation, read from the body as an ordered tree so that the
// template sees the client's key order.
void read_chat(Reader& r, const jinja::Value& ordered, ChatConversation& out) {
  if (auto error = read_chat_conversation(ordered, out)) {
    if (!r.error) r.error = *error;
  }
}

// response_format {"type": "text" | "json_object" | "json_schema", ...} or a
// GBNF `grammar`, as the grammar the output must follow.
void read_output_format(Reader& r, const jinja::Value& ordered, CompletionRequest& out) {
  const jinja::Dict& body = ordered.as_dict();
  const jinja::Value* format = body.find("response_format");
  const jinja::Value* gbnf = body.find("grammar");
  const bool has_format = format && !format->is_none(), has_grammar = gbnf && !gbnf->is_none();
  if (has_format && has_grammar) return r.fail("grammar", "and 'response_format' cannot both be given");
  if (has_grammar) {
    if (!gbnf->is_string()) return r.fail("grammar", "must be a GBNF grammar (a string)");
    out.grammar = gbnf->as_string();
    out.grammar_field = "grammar";
    return;
  }
  if (!has_format) return;
  const jinja::Value* type = format->is_dict() ? format->as_dict().find("type") : nullptr;
  if (!type || !type->is_string()) return r.fail("response_format", "must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
  const std::string& t = type->as_string();
  const std::set<std::string> allowed = t == "json_schema" ? std::set<std::string>{"type", "json_schema"} : std::set<std::string>{"type"};
  for (const auto& [key, value] : format->as_dict().items) {
    if (!allowed.count(key)) return r.fail("response_format", "has an unknown field '" + key + "'");
  }
  out.grammar_field = "response_format";
  jinja::Value schema = jinja::Value(jinja::make_dict());  // json_object: any JSON value that is an object
  if (t == "text") {
    out.grammar_field.clear();
    return;
  } else if (t == "json_object") {
    schema = jinja::Value::parse_json(R"({"type": "object"})").take();
  } else if (t == "json_schema") {
    const jinja::Value* spec = format->as_dict().find("json_schema");
    if (!spec || !spec->is_dict()) return r.fail("response_format", "json_schema must be an object {\"name\", \"schema\", \"strict\"?}");
    for (const auto& [key, value] : spec->as_dict().items) {
      if (key != "name" && key != "schema" && key != "strict" && key != "description") {
        return r.fail("response_format", "json_schema has an unknown field '" + key + "'");
      }
    }
    const jinja::Value* name = spec->as_dict().find("name");
    if (!name || !name->is_string()) return r.fail("response_format", "json_schema.name (a string) is required");
    const jinja::Value* strict = spec->as_dict().find("strict");
    if (strict && !strict->is_none() && !strict->is_bool()) return r.fail("response_format", "json_schema.strict must be true or false");
    const jinja::Value* s = spec->as_dict().find("schema");
    if (s && !s->is_none()) schema = *s;
  } else {
    return r.fail("response_format", "type '" + t.substr(0, 64) + "' is not one of text, json_object, json_schema");
  }
  auto gbnf_text = grammar::json_schema_to_gbnf(schema);
  if (!gbnf_text.ok()) return r.fail("response_format", gbnf_text.message());
  out.grammar = gbnf_text.take();
}

// {"token id": bias in [-100, 100], ...}, at most k_max_logit_bias entries.
void read_logit_bias(Reader& r, const json& bias, SamplingParams& out) {
  if (!bias.is_object()) return r.fail("logit_bias", "must be an object mapping token ids to numbers");
  if (bias.size() > size_t(k_max_logit_bias)) return r.fail("logit_bias", "has more than " + std::to_string(k_max_logit_bias) + " entries");
  for (const auto& [key, value] : bias.items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX) return r.fail("logit_bias", "key '" + key.substr(0, 32) + "' is not a token id");
    if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0)) {
      return r.fail("logit_bias", "values must be numbers between -100 and 100");
    }
    out.logit_bias.emplace_back(int32_t(id), float(value.get<double>()));
  }
}

void read_prompt(Reader& r, CompletionRequest& out) {
  const json* prompt = r.field("prompt");
  if (!prompt) return r.fail("prompt", "is required");
  const auto tokens = [&](const json& array) {
    for (const json& t : array) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
        return r.fail("prompt", "token ids must be non-negative integers"), false;
      }
      out.prompt_tokens.push_back(int32_t(t.get<int64_t>()));
    }
    out.prompt_is_tokens = true;
    return true;
  };
  if (prompt->is_string()) {
    out.prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    tokens(*prompt);
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    out.prompt_text = (*prompt)[0].get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_array()) {
    tokens((*prompt)[0]);
  } else if (prompt->is_array() && prompt->size() > 1) {
    r.fail("prompt", "holds several prompts; send one per request");
  } else {
    r.fail("prompt", "must be a string, an array of token ids, or a one-element array of either");
  }
  if (!r.error && out.prompt_is_tokens && out.prompt_tokens.empty()) r.fail("prompt", "must not be empty");
}


std::variant<json, ApiError> parse_body(const std::string& body) { return parse_json_object<json>(body); }

}  // namespace

std::variant<CompletionRequest, ApiError> parse_completion_request(Endpoint endpoint, const std::string& body) {
  auto object = parse_body(body);
  if (auto* error = std::get_if<ApiError>(&object)) return *error;
  const json& parsed = std::get<json>(object);
  if (auto error = unknown_field(parsed, k_common_fields, endpoint == Endpoint::chat ? k_chat_fields : k_completion_fields, "")) {
    return *error;
  }
  Reader r{parsed, std::nullopt};
  CompletionRequest out;
  out.endpoint = endpoint;
  out.model = r.string("model").value_or("");
  auto ordered = jinja::Value::parse_json(body);
  if (!ordered.ok()) return ApiError::invalid("", "the request body is not valid JSON");
  if (endpoint == Endpoint::chat) {
    read_chat(r, ordered.value(), out.chat);
    // vLLM's extension: false leaves the assistant's turn unopened (the template decides what that means).
    out.chat.input.add_generation_prompt = r.boolean("add_generation_prompt").value_or(true);
  } else {
    read_prompt(r, out);
  }
  // OpenAI's sampling defaults: temperature 1, nucleus off; dsinfer's extras off.
  out.sampling = SamplingParams{};
  out.sampling.temperature = float(r.number("temperature", 0.0, 2.0).value_or(1.0));
  out.sampling.top_p = float(r.number("top_p", 0.0, 1.0).value_or(1.0));
  if (out.sampling.top_p <= 0.0f && !r.error) r.fail("top_p", "must be greater than 0");
  out.sampling.top_k = int32_t(r.integer("top_k", -1, 1 << 20).value_or(0));
  out.sampling.min_p = float(r.number("min_p", 0.0, 1.0).value_or(0.0));
  out.sampling.presence_penalty = float(r.number("presence_penalty", -2.0, 2.0).value_or(0.0));
  out.sampling.frequency_penalty = float(r.number("frequency_penalty", -2.0, 2.0).value_or(0.0));
  out.sampling.repetition_penalty = float(r.number("repetition_penalty", 0.01, 10.0).value_or(1.0));
  if (auto seed = r.integer("seed", INT64_MIN, INT64_MAX)) {
    out.sampling.seed = uint64_t(*seed);
  } else {
    out.sampling.seed = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  }
  // echo with max_tokens 0 scores a prompt without generating (lm-evaluation-harness's loglikelihood).
  if (endpoint == Endpoint::completion) out.echo = r.boolean("echo").value_or(false);
  auto max_tokens = r.integer("max_tokens", out.echo ? 0 : 1, 1 << 30);
  if (auto m = r.integer("max_completion_tokens", 1, 1 << 30)) max_tokens = m;
  if (max_tokens) out.max_tokens = int32_t(*max_tokens);
  out.n = int32_t(r.integer("n", 1, k_max_choices).value_or(1));
  if (const json* stop = r.field("stop")) {
    if (stop->is_string()) {
      out.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 16) {
      for (const json& s : *stop) {
        if (!s.is_string()) r.fail("stop", "must be a string or an array of strings");
        else out.stop.push_back(s.get<std::string>());
      }
    } else {
      r.fail("stop", "must be a string or an array of up to 16 strings");
    }
    for (const std::string& s : out.stop) {
      if (s.empty()) r.fail("stop", "must not contain empty strings");
    }
  }
  if (const json* ids = r.field("stop_token_ids")) {
    if (!ids->is_array() || ids->size() > 64) {
      r.fail("stop_token_ids", "must be an array of up to 64 token ids");
    } else {
      for (const json& t : *ids) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
          r.fail("stop_token_ids", "must hold non-negative integer token ids");
          break;
        }
        out.stop_token_ids.push_back(int32_t(t.get<int64_t>()));
      }
    }
  }
  out.ignore_eos = r.boolean("ignore_eos").value_or(false);
  out.stream = r.boolean("stream").value_or(false);
  if (const json* options = r.field("stream_options")) {
    if (!options->is_object()) {
      r.fail("stream_options", "must be an object");
    } else if (auto error = unknown_field(*options, {"include_usage"}, {}, "stream_options")) {
      r.fail("stream_options", error->message);
    } else if (options->contains("include_usage") && !(*options)["include_usage"].is_null()) {
      if (!(*options)["include_usage"].is_boolean()) r.fail("stream_options", "include_usage must be true or false");
      else out.include_usage = (*options)["include_usage"].get<bool>();
    }
  }
  if (endpoint == Endpoint::chat) {
    const bool logprobs = r.boolean("logprobs").value_or(false);
    const auto top = r.integer("top_logprobs", 0, 20);
    if (top && !logprobs) r.fail("top_logprobs", "needs logprobs set to true");
    if (logprobs) out.logprobs = int32_t(top.value_or(0));
  } else if (auto logprobs = r.integer("logprobs", 0, 20)) {
    out.logprobs = int32_t(*logprobs);
  }
  if (const json* bias = r.field("logit_bias")) read_logit_bias(r, *bias, out.sampling);
  out.user = r.string("user").value_or("");
  read_output_format(r, ordered.value(), out);
  if (r.error) return *r.error;
  return out;
}

std::variant<TokenizeRequest, ApiError> parse_tokenize_request(const std::string& body) {
  auto object = parse_body(body);
  if (auto* error = std::get_if<ApiError>(&object)) return *error;
  const json& parsed = std::get<json>(object);
  if (auto error = unknown_field(parsed, {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt",
                                          "return_token_strs", "tools", "chat_template_kwargs"}, {}, "")) {
    return *error;
  }
  Reader r{parsed, std::nullopt};
  TokenizeRequest out;
  out.model = r.string("model").value_or("");
  const bool has_prompt = r.field("prompt") != nullptr, has_messages = r.field("messages") != nullptr;
  if (has_prompt == has_messages) return ApiError::invalid("prompt", "give exactly one of 'prompt' (a string) and 'messages'");
  if (has_prompt) {
    out.prompt = r.string("prompt");
    for (const char* chat_only : {"tools", "chat_template_kwargs"}) {
      if (r.field(chat_only)) return ApiError::invalid(chat_only, std::string("'") + chat_only + "' goes with 'messages', not with a prompt");
    }
  } else {
    auto ordered = jinja::Value::parse_json(body);
    if (!ordered.ok()) return ApiError::invalid("", "the request body is not valid JSON");
    read_chat(r, ordered.value(), out.chat);
  }
  out.add_special_tokens = r.boolean("add_special_tokens").value_or(has_prompt);
  out.chat.input.add_generation_prompt = r.boolean("add_generation_prompt").value_or(true);
  out.return_token_strs = r.boolean("return_token_strs").value_or(false);
  if (r.error) return *r.error;
  return out;
}

std::variant<EmbeddingRequest, ApiError> parse_embedding_request(const std::string& body) {
  auto object = parse_body(body);
  if (auto* error = std::get_if<ApiError>(&object)) return *error;
  const json& parsed = std::get<json>(object);
  if (auto error = unknown_field(parsed, {"model", "input", "encoding_format", "dimensions", "user"}, {}, "")) return *error;
  Reader r{parsed, std::nullopt};
  EmbeddingRequest out;
  out.model = r.string("model").value_or("");
  const std::string format = r.string("encoding_format").value_or("float");
  if (format != "float" && format != "base64") r.fail("encoding_format", "must be float or base64");
  out.base64 = format == "base64";
  if (auto d = r.integer("dimensions", 1, 1 << 20)) out.dimensions = *d;
  r.string("user");
  const json* input = r.field("input");
  const auto ids = [&](const json& list) -> std::optional<std::vector<int32_t>> {
    std::vector<int32_t> tokens;
    for (const json& t : list) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) return std::nullopt;
      tokens.push_back(int32_t(t.get<int64_t>()));
    }
    return tokens;
  };
  if (!input) {
    r.fail("input", "is required");
  } else if (input->is_string()) {
    out.texts.push_back(input->get<std::string>());
  } else if (!input->is_array() || input->empty() || input->size() > k_max_embedding_inputs) {
    r.fail("input", "must be a string, or a non-empty array of at most " + std::to_string(k_max_embedding_inputs) + " inputs");
  } else if ((*input)[0].is_string()) {
    for (const json& text : *input) {
      if (!text.is_string()) return ApiError::invalid("input", "'input' mixes strings with other values");
      out.texts.push_back(text.get<std::string>());
    }
  } else if ((*input)[0].is_array()) {
    for (const json& list : *input) {
      auto tokens = list.is_array() ? ids(list) : std::nullopt;
      if (!tokens) return ApiError::invalid("input", "'input' lists must hold non-negative integer token ids");
      out.token_lists.push_back(*tokens);
    }
  } else {
    auto tokens = ids(*input);
    if (!tokens) return ApiError::invalid("input", "'input' must be strings or token ids");
    out.token_lists.push_back(*tokens);
  }
  for (const std::string& text : out.texts) {
    if (text.empty()) r.fail("input", "must not hold empty strings");
  }
  for (const auto& list : out.token_lists) {
    if (list.empty()) r.fail("input", "must not hold empty token lists");
  }
  if (r.error) return *r.error;
  return out;
}

std::variant<DetokenizeRequest, ApiError> parse_detokenize_request(const std::string& body) {
  auto object = parse_body(body);
  if (auto* error = std::get_if<ApiError>(&object)) return *error;
  const json& parsed = std::get<json>(object);
  if (auto error = unknown_field(parsed, {"model", "tokens"}, {}, "")) return *error;
  Reader r{parsed, std::nullopt};
  DetokenizeRequest out;
  out.model = r.string("model").value_or("");
  const json* tokens = r.field("tokens");
  if (!tokens || !tokens->is_array()) return ApiError::invalid("tokens", "'tokens' must be an array of token ids");
  for (const json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
      return ApiError::invalid("tokens", "'tokens' must hold non-negative integer token ids");
    }
    out.tokens.push_back(int32_t(t.get<int64_t>()));
  }
  if (r.error) return *r.error;
  return out;
}

}  // namespace ds
