#include "server/api_server.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "server/completion_request.h"
#include "server/openapi.h"
#include "server/reasoning_splitter.h"

namespace ds {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* finish_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
    case FinishReason::none: break;
  }
  return "none";
}

json bytes_of(const std::string& piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(int(c));
  return bytes;
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// One generation request from submit to its last byte. Lives on the
// connection's strand; the engine thread only posts wake-ups to it.
struct Server::Generation : std::enable_shared_from_this<Generation> {
  Server& server;
  std::shared_ptr<HttpExchange> exchange;
  CompletionRequest request;
  std::string id, tenant, path;
  int64_t created = unix_time();
  Clock::time_point arrived = Clock::now();
  std::shared_ptr<RequestStream> stream;
  std::optional<ReasoningSplitter> splitter;
  int32_t n_prompt = 0;
  std::string prompt_text;  // for the access log with --log-prompts
  // Non-streamed replies accumulate here.
  std::string content, reasoning;
  json logprobs = json::array();  // one entry per token
  size_t text_offset = 0;
  std::shared_ptr<Generation> self_hold;  // alive until the final event, even if the client has gone
  bool timed_out = false, gone = false, done = false;

  Generation(Server& s, std::shared_ptr<HttpExchange> e, CompletionRequest r) : server(s), exchange(std::move(e)), request(std::move(r)) {}

  bool chat() const { return request.endpoint == Endpoint::chat; }

  void start() {
    auto self = shared_from_this();
    self_hold = self;
    std::weak_ptr<Generation> weak = self;
    exchange->on_disconnect([weak] {
      if (auto g = weak.lock()) {
        g->gone = true;
        g->server.engine_.cancel(g->stream->id());
      }
    });
    exchange->after(server.options_.request_timeout, [weak] {
      if (auto g = weak.lock()) {
        g->timed_out = true;
        g->server.engine_.cancel(g->stream->id());
      }
    });
    if (request.stream) {
      exchange->begin_stream(200, "text/event-stream");
      if (chat()) send_chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr, json(nullptr));
    }
    stream->set_listener([weak, exchange = exchange] {
      exchange->post([weak] {
        if (auto g = weak.lock()) g->drain();
      });
    });
  }

  void drain() {
    while (!done) {
      auto event = stream->next(std::chrono::milliseconds(0));
      if (!event) return;
      on_event(*event);
    }
  }

  json token_logprobs_json(const StreamEvent& event) {
    json entries = json::array();
    for (size_t i = 0; i < event.logprobs.size() && i < event.tokens.size(); ++i) {
      const std::string piece = server.tokenizer_.token_to_piece(event.tokens[i], false);
      const TokenLogprobs& lp = event.logprobs[i];
      if (chat()) {
        json top = json::array();
        for (const auto& [token, logprob] : lp.top) {
          const std::string p = server.tokenizer_.token_to_piece(token, false);
          top.push_back({{"token", p}, {"logprob", logprob}, {"bytes", bytes_of(p)}});
        }
        entries.push_back({{"token", piece}, {"logprob", lp.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
      } else {
        json top = json::object();
        for (const auto& [token, logprob] : lp.top) top[server.tokenizer_.token_to_piece(token, false)] = logprob;
        entries.push_back({{"token", piece}, {"logprob", lp.logprob}, {"top", top}, {"offset", text_offset}});
        text_offset += piece.size();
      }
    }
    return entries;
  }

  // Completions report logprobs as parallel arrays.
  static json completion_arrays(const json& entries) {
    json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    for (const json& e : entries) {
      out["tokens"].push_back(e["token"]);
      out["token_logprobs"].push_back(e["logprob"]);
      out["top_logprobs"].push_back(e["top"]);
      out["text_offset"].push_back(e["offset"]);
    }
    return out;
  }

  void on_event(const StreamEvent& event) {
    ReasoningDelta delta;
    if (splitter) {
      delta = splitter->push(event.text);
    } else {
      delta.content = event.text;
    }
    json lp = request.logprobs >= 0 ? token_logprobs_json(event) : json(nullptr);
    if (event.finish != FinishReason::none && splitter) {
      ReasoningDelta rest = splitter->flush();
      delta.reasoning += rest.reasoning;
      delta.content += rest.content;
    }
    if (request.stream) {
      const bool has_text = !delta.content.empty() || !delta.reasoning.empty();
      if (has_text || (!lp.is_null() && !lp.empty())) {
        json d = json::object();
        if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
        if (!delta.content.empty() || delta.reasoning.empty()) d["content"] = delta.content;
        send_chunk(d, lp, json(nullptr));
      }
    } else {
      content += delta.content;
      reasoning += delta.reasoning;
      if (!lp.is_null()) logprobs.insert(logprobs.end(), lp.begin(), lp.end());
    }
    if (event.finish != FinishReason::none) finish(event);
  }

  json choice_logprobs(const json& entries) const {
    if (entries.is_null() || request.logprobs < 0) return json(nullptr);
    return chat() ? json{{"content", entries}} : completion_arrays(entries);
  }

  void send_chunk(const json& delta, const json& entries, const json& finish_reason) {
    json choice = {{"index", 0}, {"logprobs", choice_logprobs(entries)}, {"finish_reason", finish_reason}};
    if (chat()) {
      choice["delta"] = delta;
    } else {
      choice["text"] = delta.value("content", "");
    }
    const json chunk = {{"id", id}, {"object", chat() ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                        {"model", server.options_.model_name}, {"choices", json::array({choice})}};
    exchange->write_chunk("data: " + dump(chunk) + "\n\n");
  }

  json usage(const RequestMetrics& m) const {
    return {{"prompt_tokens", m.n_prompt_tokens},
            {"completion_tokens", m.n_output_tokens},
            {"total_tokens", m.n_prompt_tokens + m.n_output_tokens},
            {"prompt_tokens_details", {{"cached_tokens", m.n_cached_prompt_tokens}}}};
  }

  void finish(const StreamEvent& event) {
    done = true;
    stream->set_listener(nullptr);
    const auto release = std::move(self_hold);  // this object may go when finish returns
    const RequestMetrics m = event.metrics.value_or(RequestMetrics{n_prompt, 0, 0, 0, 0, 0, 0});
    int status = 200;
    std::string reason = finish_name(event.finish);
    if (gone) {
      reason = "client_gone";
      status = 499;  // nginx's code for a client that closed the connection; logged, never sent
    } else if (timed_out || event.finish == FinishReason::error || event.finish == FinishReason::cancelled) {
      ApiError error = timed_out ? ApiError{503, "the request did not finish within --request-timeout", "server_error", "", "timeout", 1}
                                 : ApiError{500, "the engine failed: " + event.error, "server_error", "", "engine_error", 0};
      if (!timed_out && event.finish == FinishReason::cancelled) error = ApiError{503, "the server is shutting down", "server_error", "", "shutting_down", 1};
      reason = timed_out ? "timeout" : reason;
      status = error.status;
      if (request.stream) {
        exchange->write_chunk("data: " + error.json() + "\n\n");
        exchange->write_chunk("data: [DONE]\n\n");
        exchange->end_stream();
        server.metrics_.add("dsinfer:http_requests_total", "path=\"" + path + "\",status=\"200\"");
      } else {
        server.reply_error(*exchange, path, error);
      }
    } else if (request.stream) {
      send_chunk(json::object(), nullptr, reason);
      if (request.include_usage) {
        const json chunk = {{"id", id}, {"object", chat() ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                            {"model", server.options_.model_name}, {"choices", json::array()}, {"usage", usage(m)}};
        exchange->write_chunk("data: " + dump(chunk) + "\n\n");
      }
      exchange->write_chunk("data: [DONE]\n\n");
      exchange->end_stream();
      server.metrics_.add("dsinfer:http_requests_total", "path=\"" + path + "\",status=\"200\"");
    } else {
      json choice = {{"index", 0}, {"finish_reason", reason}, {"logprobs", choice_logprobs(request.logprobs >= 0 ? logprobs : json(nullptr))}};
      if (chat()) {
        json message = {{"role", "assistant"}, {"content", content}};
        if (splitter) message["reasoning_content"] = reasoning;
        choice["message"] = message;
      } else {
        choice["text"] = content;
      }
      const json body = {{"id", id}, {"object", chat() ? "chat.completion" : "text_completion"}, {"created", created},
                         {"model", server.options_.model_name}, {"choices", json::array({choice})}, {"usage", usage(m)}};
      server.reply(*exchange, path, 200, "application/json", dump(body));
    }
    record(m, status, reason);
  }

  void record(const RequestMetrics& m, int status, const std::string& reason) {
    --server.in_flight_;
    Metrics& metrics = server.metrics_;
    metrics.add("dsinfer:request_success_total", "finished_reason=\"" + reason + "\"");
    metrics.add("dsinfer:prompt_tokens_total", "", m.n_prompt_tokens);
    metrics.add("dsinfer:generation_tokens_total", "", m.n_output_tokens);
    if (m.n_output_tokens > 0) metrics.observe("dsinfer:time_to_first_token_seconds", m.ttft_seconds);
    if (m.n_output_tokens > 1) metrics.observe("dsinfer:time_per_output_token_seconds", m.tpot_seconds);
    metrics.observe("dsinfer:e2e_request_latency_seconds", std::chrono::duration<double>(Clock::now() - arrived).count());
    metrics.observe("dsinfer:request_queue_time_seconds", m.queue_seconds);
    json line = {{"id", id},
                 {"tenant", tenant},
                 {"path", path},
                 {"status", status},
                 {"prompt_tokens", m.n_prompt_tokens},
                 {"cached_tokens", m.n_cached_prompt_tokens},
                 {"output_tokens", m.n_output_tokens},
                 {"ttft_ms", std::round(m.ttft_seconds * 1e4) / 10},
                 {"total_ms", std::round(std::chrono::duration<double>(Clock::now() - arrived).count() * 1e4) / 10},
                 {"finish_reason", reason}};
    if (server.options_.log_prompts) line["prompt"] = prompt_text;
    DS_LOG_INFO("access %s", dump(line).c_str());
  }
};

Server::Server(Engine& engine, const Tokenizer& tokenizer, std::optional<ChatFormat> chat_format, Admission& admission,
               const ServerOptions& options)
    : engine_(engine), tokenizer_(tokenizer), chat_format_(chat_format), admission_(admission), options_(options) {}

Server::~Server() = default;

void Server::reply(HttpExchange& exchange, const std::string& path, int status, const std::string& content_type,
                   const std::string& body, const HttpHeaders& headers) {
  metrics_.add("dsinfer:http_requests_total", "path=\"" + path + "\",status=\"" + std::to_string(status) + "\"");
  exchange.respond(status, content_type, body, headers);
}

void Server::reply_error(HttpExchange& exchange, const std::string& path, const ApiError& error) {
  HttpHeaders headers;
  if (error.retry_after_seconds > 0) headers.emplace_back("Retry-After", std::to_string(error.retry_after_seconds));
  if (error.status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  reply(exchange, path, error.status, "application/json", error.json(), headers);
}

void Server::handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  const std::string path = request.path();
  const bool known = path == "/health" || path == "/ready" || path == "/metrics" || path == "/openapi.json" ||
                     path == "/v1/models" || path == "/v1/chat/completions" || path == "/v1/completions";
  const std::string label = known ? path : "other";
  if (!known) return reply_error(*exchange, label, ApiError{404, "no such path: " + path, "invalid_request_error", "", "not_found", 0});
  const bool post = path == "/v1/chat/completions" || path == "/v1/completions";
  if (request.method != (post ? "POST" : "GET")) {
    metrics_.add("dsinfer:http_requests_total", "path=\"" + label + "\",status=\"405\"");
    const ApiError error{405, path + " takes " + (post ? "POST" : "GET"), "invalid_request_error", "", "method_not_allowed", 0};
    return exchange->respond(405, "application/json", error.json(), {{"Allow", post ? "POST" : "GET"}});
  }
  if (path == "/health") return reply(*exchange, label, 200, "application/json", "{\"status\":\"ok\"}");
  if (path == "/ready") {
    const bool ready = ready_ && !draining_;
    return reply(*exchange, label, ready ? 200 : 503, "application/json",
                 ready ? "{\"status\":\"ready\"}" : draining_ ? "{\"status\":\"draining\"}" : "{\"status\":\"starting\"}");
  }
  if (path == "/metrics") {
    return reply(*exchange, label, 200, "text/plain; version=0.0.4", metrics_.render(engine_.stats(), in_flight_));
  }
  if (path == "/openapi.json") return reply(*exchange, label, 200, "application/json", openapi_spec());

  // Everything else is the API proper: the key first.
  const auto tenant = admission_.tenant(request.header("authorization"));
  if (!tenant) {
    metrics_.add("dsinfer:request_rejected_total", "reason=\"auth\"");
    return reply_error(*exchange, label, ApiError{401, "missing or unknown API key (send 'Authorization: Bearer KEY')", "authentication_error", "", "invalid_api_key", 0});
  }
  if (path == "/v1/models") {
    const json body = {{"object", "list"},
                       {"data", json::array({{{"id", options_.model_name}, {"object", "model"}, {"created", 0},
                                              {"owned_by", "dsinfer"}, {"max_model_len", options_.max_context}}})}};
    return reply(*exchange, label, 200, "application/json", dump(body));
  }
  generate(request, exchange, *tenant, path == "/v1/chat/completions");
}

void Server::generate(const HttpRequest& http, std::shared_ptr<HttpExchange> exchange, const std::string& tenant, bool chat) {
  const std::string path = http.path();
  const auto reject = [&](const char* reason, const ApiError& error) {
    metrics_.add("dsinfer:request_rejected_total", std::string("reason=\"") + reason + "\"");
    reply_error(*exchange, path, error);
  };
  auto parsed = parse_completion_request(chat ? Endpoint::chat : Endpoint::completion, http.body);
  if (auto* error = std::get_if<ApiError>(&parsed)) return reject("invalid", *error);
  CompletionRequest& request = std::get<CompletionRequest>(parsed);
  if (!request.model.empty() && request.model != options_.model_name) {
    return reject("model", ApiError{404, "the model '" + request.model + "' does not exist; this server serves '" + options_.model_name + "'",
                                    "invalid_request_error", "model", "model_not_found", 0});
  }
  if (chat && !chat_format_) {
    return reject("invalid", ApiError::invalid("messages", "this model has no chat template; use /v1/completions"));
  }
  if (draining_ || !ready_) {
    return reject("draining", ApiError{503, draining_ ? "the server is shutting down" : "the model is still loading", "server_error", "", "unavailable", 1});
  }
  if (const double wait = admission_.take(tenant); wait > 0) {
    return reject("rate_limit", ApiError{429, "rate limit reached for tenant '" + tenant + "'", "rate_limit_error", "", "rate_limit_exceeded",
                                         int(std::ceil(wait))});
  }

  auto g = std::make_shared<Generation>(*this, exchange, std::move(request));
  CompletionRequest& r = g->request;
  std::vector<int32_t> prompt;
  if (chat) {
    const std::string bos = tokenizer_.vocab().bos != k_no_token ? tokenizer_.vocab().tokens[size_t(tokenizer_.vocab().bos)] : "";
    auto text = render_chat(*chat_format_, r.messages, true, bos);
    if (!text.ok()) return reject("invalid", ApiError::invalid("messages", text.message()));
    g->prompt_text = text.value();
    prompt = tokenizer_.encode(text.value(), false, true);
    if (*chat_format_ == ChatFormat::deepseek_r1) {
      const std::string& t = text.value();
      const std::string open = "<think>\n";
      g->splitter.emplace(t.size() >= open.size() && t.compare(t.size() - open.size(), open.size(), open) == 0);
    }
  } else if (r.prompt_is_tokens) {
    prompt = r.prompt_tokens;
    for (int32_t t : prompt) {
      if (t >= int32_t(tokenizer_.vocab().tokens.size())) {
        return reject("invalid", ApiError::invalid("prompt", "token id " + std::to_string(t) + " is outside the vocabulary"));
      }
    }
  } else {
    g->prompt_text = r.prompt_text;
    prompt = tokenizer_.encode(r.prompt_text, true, true);
  }
  if (prompt.empty()) return reject("invalid", ApiError::invalid(chat ? "messages" : "prompt", "the prompt is empty"));
  const int64_t n_prompt = int64_t(prompt.size());
  const int64_t max_tokens = r.max_tokens ? *r.max_tokens : options_.max_context - n_prompt;
  if (n_prompt + std::max<int64_t>(max_tokens, 1) > options_.max_context) {
    return reject("context", ApiError{400, "this model's context is " + std::to_string(options_.max_context) + " tokens; the prompt has " +
                                               std::to_string(n_prompt) + " and max_tokens asks for " + std::to_string(max_tokens),
                                      "invalid_request_error", r.max_tokens ? "max_tokens" : (chat ? "messages" : "prompt"),
                                      "context_length_exceeded", 0});
  }
  // Work the engine can start now, or 503 at once rather than a timeout later.
  if (in_flight_ >= options_.max_in_flight) {
    return reject("queue_full", ApiError{503, "the server is at its limit of " + std::to_string(options_.max_in_flight) + " requests in flight",
                                         "server_error", "", "overloaded", 1});
  }
  const EngineStats stats = engine_.stats();
  const int64_t prompt_pages = (n_prompt + options_.page_tokens - 1) / options_.page_tokens;
  const int64_t reserve = int64_t(std::ceil(options_.kv_reserve * stats.pages_total));
  if (stats.pages_total > 0 && stats.pages_total - stats.pages_held < prompt_pages + reserve) {
    return reject("kv_watermark", ApiError{503, "the KV cache is too full to take this prompt now", "server_error", "", "overloaded", 1});
  }

  EngineRequest engine_request;
  engine_request.prompt = std::move(prompt);
  engine_request.params.sampling = r.sampling;
  engine_request.params.max_tokens = int32_t(max_tokens);
  engine_request.params.tenant_salt = tenant_salt(tenant);
  engine_request.params.logprobs = r.logprobs;
  engine_request.stop = r.stop;
  g->id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  g->tenant = tenant;
  g->path = path;
  g->n_prompt = int32_t(n_prompt);
  ++in_flight_;
  g->stream = engine_.submit(std::move(engine_request));
  g->start();
}

}  // namespace ds
