#include "server/api_server.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "base/version.h"
#include "server/anthropic_request.h"
#include "server/batch_api.h"
#include "server/batch_store.h"
#include "server/completion_request.h"
#include "server/openapi.h"
#include "server/response_store.h"
#include "server/responses_request.h"
#include "server/generation.h"
#include "server/tool_choice_grammar.h"

namespace ds {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

namespace {

enum class RouteKind {
  plain,       // answered on the I/O thread from what is at hand
  generation,  // rate-limited and admitted; prepared off the I/O threads
  tokenizer,   // /tokenize and /detokenize: off the I/O threads, not rate-limited
  store,       // stored responses, files and batches (--store-dir): off the I/O threads, not rate-limited
  admin,       // the admin API: its own keys; swaps run on the admin thread
};

struct Route {
  const char* path;  // "/v1/models/{model}" matches any one segment there
  const char* methods;  // "GET", or "GET, POST"
  bool needs_key;    // with --api-keys (/metrics unless --metrics-public); admin routes always need an admin key
  RouteKind kind;
};

constexpr Route k_routes[] = {
    {"/health", "GET", false, RouteKind::plain},
    {"/ready", "GET", false, RouteKind::plain},
    {"/version", "GET", false, RouteKind::plain},
    {"/metrics", "GET", true, RouteKind::plain},
    {"/openapi.json", "GET", false, RouteKind::plain},
    {"/v1/models", "GET", true, RouteKind::plain},
    {"/v1/models/{model}", "GET", true, RouteKind::plain},
    {"/v1/chat/completions", "POST", true, RouteKind::generation},
    {"/v1/completions", "POST", true, RouteKind::generation},
    {"/v1/embeddings", "POST", true, RouteKind::generation},
    {"/v1/messages", "POST", true, RouteKind::generation},
    {"/v1/messages/count_tokens", "POST", true, RouteKind::tokenizer},
    {"/v1/responses", "POST", true, RouteKind::generation},
    {"/v1/responses/{id}", "GET, DELETE", true, RouteKind::store},
    {"/v1/responses/{id}/input_items", "GET", true, RouteKind::store},
    {"/v1/files", "GET, POST", true, RouteKind::store},
    {"/v1/files/{id}", "GET, DELETE", true, RouteKind::store},
    {"/v1/files/{id}/content", "GET", true, RouteKind::store},
    {"/v1/batches", "GET, POST", true, RouteKind::store},
    {"/v1/batches/{id}", "GET", true, RouteKind::store},
    {"/v1/batches/{id}/cancel", "POST", true, RouteKind::store},
    {"/tokenize", "POST", true, RouteKind::tokenizer},
    {"/detokenize", "POST", true, RouteKind::tokenizer},
    {"/admin/models", "GET, POST", true, RouteKind::admin},
    {"/admin/trace", "POST", true, RouteKind::admin},
    {"/admin/debug", "POST", true, RouteKind::admin},
};

bool takes(const Route& route, const std::string& method) {
  const std::string methods = route.methods;
  for (size_t at = 0; at < methods.size();) {
    const size_t end = std::min(methods.find(", ", at), methods.size());
    if (methods.compare(at, end - at, method) == 0) return true;
    at = end + 2;
  }
  return false;
}

constexpr const char* k_model_prefix = "/v1/models/";

// Whether `path` is `pattern`, where a "{name}" segment of the pattern stands for any one non-empty segment.
bool matches(const std::string& pattern, const std::string& path) {
  size_t p = 0, q = 0;
  while (p < pattern.size() && q < path.size()) {
    if (pattern[p] == '{') {
      p = pattern.find('}', p) + 1;
      const size_t end = std::min(path.find('/', q), path.size());
      if (end == q) return false;
      q = end;
    } else if (pattern[p++] != path[q++]) {
      return false;
    }
  }
  return p == pattern.size() && q == path.size();
}

// A path's route, or nullptr; `path` may also be a route's own pattern (the access log's label).
const Route* find_route(const std::string& path) {
  for (const Route& route : k_routes) {
    if (path == route.path || matches(route.path, path)) return &route;
  }
  return nullptr;
}

// Anthropic's routes: their keys may come as x-api-key, their errors go in Anthropic's shape.
bool is_anthropic(const std::string& label) { return label.rfind("/v1/messages", 0) == 0; }

// The anthropic-version values served, each with the same Messages shape: the
// API's first (2023-06-01, what most clients send) and what the anthropic SDK of
// the tests (2.17) sends. Another is refused, naming the ones served.
const std::set<std::string> k_anthropic_versions = {"2023-06-01", "2026-10-21"};

std::string error_body(const std::string& label, const ApiError& error) {
  return is_anthropic(label) ? anthropic_error_json(error) : error.json();
}

bool is_generation(const std::string& label) {
  const Route* route = find_route(label);
  return route && route->kind == RouteKind::generation;
}

HttpHeaders error_headers(const ApiError& error) {
  HttpHeaders headers;
  if (error.retry_after_seconds > 0) headers.emplace_back("Retry-After", std::to_string(error.retry_after_seconds));
  if (error.status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  return headers;
}

}  // namespace

Server::Server(ModelVersions& versions, Admission& admission, const ServerOptions& options, AdminApi* admin)
    : versions_(versions),
      admission_(admission),
      admin_(admin),
      options_(options),
      prepare_queue_(options.prepare_threads, options.max_prepare_queue) {}

Server::~Server() = default;

std::string Server::api_key_header(const HttpRequest& head, const std::string& label) {
  const std::string authorization = head.header("authorization");
  const std::string x_api_key = head.header("x-api-key");
  if (authorization.empty() && is_anthropic(label) && !x_api_key.empty()) return "Bearer " + x_api_key;
  return authorization;
}

Server::RequestContext Server::context_of(const HttpRequest& head) const {
  RequestContext context;
  context.request_id = head.request_id;
  context.client = head.remote_address;
  context.method = head.method;
  const Route* route = find_route(head.path());
  context.path = route ? route->path : "other";  // a label with few values, for metrics too
  context.arrived = Clock::now();
  if (route && route->kind == RouteKind::admin) {
    if (auto who = admin_ ? admin_->operator_of(head.header("authorization")) : std::nullopt) context.tenant = "admin:" + *who;
  } else if (auto tenant = admission_.tenant(api_key_header(head, context.path))) {
    context.tenant = *tenant;
  }
  return context;
}

AccessRecord Server::access_record(const RequestContext& context, int status, const std::string& reason) const {
  AccessRecord record;
  record.request_id = context.request_id;
  record.client = context.client;
  record.tenant = context.tenant;
  record.method = context.method;
  record.path = context.path;
  record.status = status;
  record.reason = reason;
  record.version = context.version;
  record.total_ms = std::chrono::duration<double, std::milli>(Clock::now() - context.arrived).count();
  return record;
}

void Server::log_access(const RequestContext& context, int status, const std::string& reason) {
  write_access_log(access_record(context, status, reason));
}

void Server::count_request(const std::string& path, int status) {
  metrics_.add("dsinfer:http_requests_total", "path=\"" + path + "\",status=\"" + std::to_string(status) + "\"");
}

void Server::answer(const RequestContext& context, HttpExchange& exchange, int status, const std::string& content_type,
                    const std::string& body, const std::string& reason, const HttpHeaders& headers) {
  count_request(context.path, status);
  HttpHeaders all = headers;
  if (!context.version.empty()) all.emplace_back("X-Model-Version", context.version);
  exchange.respond(status, content_type, body, all);
  log_access(context, status, reason);
}

void Server::answer_error(const RequestContext& context, HttpExchange& exchange, const ApiError& error, const std::string& reason) {
  if (is_generation(context.path)) metrics_.add("dsinfer:request_rejected_total", "reason=\"" + reason + "\"");
  answer(context, exchange, error.status, "application/json", error_body(context.path, error), reason, error_headers(error));
}

std::optional<HttpRefusal> Server::refuse_head(const RequestContext& context, const ApiError& error, const std::string& reason) {
  if (is_generation(context.path)) metrics_.add("dsinfer:request_rejected_total", "reason=\"" + reason + "\"");
  count_request(context.path, error.status);
  log_access(context, error.status, reason);
  HttpHeaders headers = error_headers(error);
  if (error.status == 405) headers.emplace_back("Allow", find_route(context.path)->methods);
  return HttpRefusal{error.status, error_body(context.path, error), std::move(headers), reason};
}

std::string Server::refusal_body(const HttpRequest& head, int status, const std::string& message) const {
  const Route* route = find_route(head.path());
  if (route && is_anthropic(route->path)) return anthropic_error_json(ApiError{status, message, "invalid_request_error", "", "", 0});
  return HttpService::refusal_body(head, status, message);
}

void Server::refused(const HttpRequest& head, int status, const std::string& reason) {
  RequestContext context = context_of(head);
  if (head.method.empty()) context.method = "-";
  count_request(context.path, status);
  log_access(context, status, reason);
}

bool Server::may_read_metrics(const HttpRequest& head) const {
  return options_.metrics_public || admission_.tenant(head.header("authorization")).has_value();
}

std::optional<HttpRefusal> Server::check_head(const HttpRequest& head) {
  const RequestContext context = context_of(head);
  const Route* route = find_route(head.path());
  if (!route) return refuse_head(context, ApiError{404, "no such path: " + head.path(), "invalid_request_error", "", "not_found", 0}, "not_found");
  if (!takes(*route, head.method)) {
    return refuse_head(context, ApiError{405, std::string(route->path) + " takes " + route->methods, "invalid_request_error", "",
                                         "method_not_allowed", 0}, "method_not_allowed");
  }
  if (route->kind == RouteKind::admin) {
    if (!admin_) {
      return refuse_head(context, ApiError{403, "the admin API is off: start the server with --admin-keys FILE", "permission_error", "",
                                           "admin_disabled", 0}, "auth");
    }
    if (context.tenant == "-") {
      return refuse_head(context, ApiError{401, "missing or unknown admin key (send 'Authorization: Bearer ADMIN_KEY'; tenants' keys "
                                                "are not admin keys)", "authentication_error", "", "invalid_api_key", 0}, "auth");
    }
    return std::nullopt;
  }
  const bool key_ok = route == find_route("/metrics") ? may_read_metrics(head) : context.tenant != "-";
  if (route->needs_key && !key_ok) {
    return refuse_head(context, ApiError{401, is_anthropic(route->path) ? "missing or unknown API key (send 'x-api-key: KEY')"
                                                                        : "missing or unknown API key (send 'Authorization: Bearer KEY')",
                                         "authentication_error", "", "invalid_api_key", 0}, "auth");
  }
  if (is_anthropic(route->path)) {
    const std::string version = head.header("anthropic-version");
    if (!version.empty() && !k_anthropic_versions.count(version)) {
      return refuse_head(context, ApiError::invalid("anthropic-version", "anthropic-version '" + version.substr(0, 64) +
                                                                             "' is not supported (2023-06-01 and 2026-10-21 are)"), "invalid");
    }
    if (!head.header("anthropic-beta").empty()) {
      return refuse_head(context, ApiError::invalid("anthropic-beta", "anthropic-beta features are not supported by dsinfer (header: '" +
                                                                          head.header("anthropic-beta").substr(0, 64) + "')"), "invalid");
    }
  }
  if (route->kind != RouteKind::generation) return std::nullopt;
  if (draining_ || !ready_) {
    return refuse_head(context, ApiError{503, draining_ ? "the server is shutting down" : "the model is still loading", "server_error", "",
                                         "unavailable", 1}, "draining");
  }
  if (!versions_.current()) {
    return refuse_head(context, ApiError{503, "the model is being swapped (drain_first); retry shortly", "server_error", "", "unavailable",
                                         admin_ ? admin_->retry_after_seconds() : 1}, "swapping");
  }
  // Not ready while stalled: nothing new is taken that could not run.
  if (const auto stalled = stall_reason()) {
    return refuse_head(context, ApiError{503, "the engine is stalled: " + *stalled, "server_error", "", "unavailable", 1}, "stalled");
  }
  const AdmissionLimits& limits = admission_.limits();
  const AdmissionDecision rate = admission_.take_rate(context.tenant);
  if (rate.refusal == Refusal::tenant_rate) {
    char message[200];
    std::snprintf(message, sizeof message, "tenant '%s' is over its rate limit of %g requests/s (burst %g)", context.tenant.c_str(),
                  limits.tenant_rate, limits.tenant_burst);
    return refuse_head(context, ApiError{429, message, "rate_limit_error", "", "rate_limit_exceeded", int(std::ceil(rate.retry_after_seconds))},
                       refusal_name(rate.refusal));
  }
  if (rate.refusal == Refusal::global_rate) {
    char message[200];
    std::snprintf(message, sizeof message, "the server is over its overall rate limit of %g requests/s (burst %g), shared by all tenants",
                  limits.global_rate, limits.global_burst);
    return refuse_head(context, ApiError{429, message, "rate_limit_error", "", "rate_limit_exceeded", int(std::ceil(rate.retry_after_seconds))},
                       refusal_name(rate.refusal));
  }
  // Only a look here: the slot is taken when the prepared request is admitted.
  if (const Refusal full = admission_.would_enter(context.tenant); full != Refusal::none) {
    return refuse_head(context, in_flight_error(full), refusal_name(full));
  }
  return std::nullopt;
}

ApiError Server::in_flight_error(Refusal refusal) const {
  const AdmissionLimits& limits = admission_.limits();
  if (refusal == Refusal::tenant_in_flight) {
    return ApiError{503, "this tenant already has its limit of " + std::to_string(limits.tenant_max_in_flight) + " requests in flight",
                    "server_error", "", "overloaded", 1};
  }
  return ApiError{503, "the server is at its limit of " + std::to_string(limits.max_in_flight) + " requests in flight", "server_error", "",
                  "overloaded", 1};
}

ApiError Server::admission_error(const Admit& admit, const std::string& param) {
  if (admit.verdict == Admit::Verdict::not_now) return ApiError{503, admit.reason, "server_error", "", "overloaded", 1};
  return ApiError{400, admit.reason, "invalid_request_error", param, "context_length_exceeded", 0};
}

const char* Server::admission_reason(const Admit& admit) {
  if (admit.verdict == Admit::Verdict::not_now) return "kv_watermark";
  return admit.limit == Admit::Limit::context ? "context" : "kv_never_fits";
}

void Server::handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  RequestContext context = context_of(request);
  const std::string path = request.path();
  if (context.path.rfind("/admin/", 0) == 0) return handle_admin(context, request, exchange);
  const std::optional<std::string> stalled = stall_reason();
  const Version version = versions_.current();
  if (stalled && (path == "/health" || path == "/ready")) {
    return answer(context, *exchange, 503, "application/json", dump(json{{"status", "stalled"}, {"reason", *stalled}}), "stalled");
  }
  if (path == "/health") return answer(context, *exchange, 200, "application/json", "{\"status\":\"ok\"}", "ok");
  if (path == "/ready") {
    const char* state = draining_ ? "draining" : !ready_ ? "starting" : !version ? "swapping" : "ready";
    const bool ready = std::strcmp(state, "ready") == 0;
    return answer(context, *exchange, ready ? 200 : 503, "application/json", dump(json{{"status", state}}), ready ? "ok" : state);
  }
  if (path == "/metrics") {
    std::string text = metrics_.render(version ? version->engine->stats() : EngineStats{}, admission_.in_flight());
    const Engine::Progress progress = version ? version->engine->progress() : Engine::Progress{};
    text += "# HELP dsinfer:engine_stalled 1 while the engine has work and no step has finished within the stall bound.\n"
            "# TYPE dsinfer:engine_stalled gauge\ndsinfer:engine_stalled " + std::string(stalled ? "1" : "0") + "\n"
            "# HELP dsinfer:engine_seconds_without_progress Seconds the busy engine has gone without finishing a step.\n"
            "# TYPE dsinfer:engine_seconds_without_progress gauge\ndsinfer:engine_seconds_without_progress " +
            std::to_string(progress.seconds_without_progress) + "\n";
    if (version) {
      text += "# HELP dsinfer:op_seconds_total Seconds by engine op over the traced steps (--trace, POST /admin/trace).\n"
              "# TYPE dsinfer:op_seconds_total counter\n";
      for (const auto& [op, seconds] : version->engine->trace().op_seconds()) {
        text += "dsinfer:op_seconds_total{op=\"" + op + "\"} " + std::to_string(seconds) + "\n";
      }
      text += "# HELP dsinfer:traced_steps_total Engine steps recorded by the profiler.\n# TYPE dsinfer:traced_steps_total counter\n"
              "dsinfer:traced_steps_total " + std::to_string(version->engine->trace().traced_steps()) + "\n";
    }
    text += "# HELP dsinfer:model_version_requests_in_flight Requests running on each loaded model version.\n"
            "# TYPE dsinfer:model_version_requests_in_flight gauge\n";
    for (const Version& v : versions_.live()) {
      text += "dsinfer:model_version_requests_in_flight{version=\"" + v->label + "\",state=\"" +
              (v == version ? "serving" : "retiring") + "\"} " + std::to_string(v->in_flight.load()) + "\n";
    }
    if (connection_stats_) {
      const HttpServerStats http = connection_stats_();
      text += "# HELP dsinfer:http_connections_open Open client connections.\n# TYPE dsinfer:http_connections_open gauge\n"
              "dsinfer:http_connections_open " + std::to_string(http.open_connections) + "\n"
              "# HELP dsinfer:http_connections_refused Connections closed at accept, over a connection cap (monotonic).\n"
              "# TYPE dsinfer:http_connections_refused gauge\n"
              "dsinfer:http_connections_refused " + std::to_string(http.refused_connections) + "\n"
              "# HELP dsinfer:http_accept_backoffs Times accept found no descriptor free and waited 100 ms (monotonic).\n"
              "# TYPE dsinfer:http_accept_backoffs gauge\n"
              "dsinfer:http_accept_backoffs " + std::to_string(http.accept_backoffs) + "\n";
    }
    return answer(context, *exchange, 200, "text/plain; version=0.0.4", text, "ok");
  }
  if (path == "/openapi.json") return answer(context, *exchange, 200, "application/json", openapi_spec(), "ok");
  if (path == "/version") return answer(context, *exchange, 200, "application/json", dump(json{{"version", k_dsinfer_version}}), "ok");
  if (is_batch_api_route(context.path)) return store_request(context, std::move(request), exchange);
  if (!version) {
    return answer_error(context, *exchange, ApiError{503, "the model is being swapped (drain_first); retry shortly", "server_error", "",
                                                     "unavailable", admin_ ? admin_->retry_after_seconds() : 1}, "swapping");
  }
  context.version = version->label;
  const json model = {{"id", options_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "dsinfer"},
                      {"max_model_len", version->engine->max_context()}, {"version", version->label}};
  if (path == "/v1/models") {
    return answer(context, *exchange, 200, "application/json", dump(json{{"object", "list"}, {"data", json::array({model})}}), "ok");
  }
  if (context.path == std::string("/v1/models/{model}")) {
    if (auto error = unknown_model(path.substr(std::strlen(k_model_prefix)))) return answer_error(context, *exchange, *error, "model");
    return answer(context, *exchange, 200, "application/json", dump(model), "ok");
  }
  run(context, version, std::move(request), exchange);
}

void Server::run(const RequestContext& context, Version version, HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  const std::string path = request.path();
  if (path.rfind("/v1/responses/", 0) == 0 && request.target.size() != path.size()) {  // OpenAI's list and include parameters
    return answer_error(context, *exchange, ApiError::invalid("query", "query parameters (limit, order, after, include) are not supported by dsinfer"),
                        "invalid");
  }
  auto body = std::make_shared<std::string>(std::move(request.body));
  const Endpoint endpoint = path == "/v1/chat/completions" ? Endpoint::chat
                            : path == "/v1/messages"       ? Endpoint::messages
                            : path == "/v1/responses"      ? Endpoint::responses
                                                           : Endpoint::completion;
  const std::string method = request.method;
  const bool queued = prepare_queue_.try_post([this, context, version, body, endpoint, path, method, exchange] {
    if (path == "/tokenize" || path == "/detokenize") return tokenize(context, *version, *body, path == "/detokenize", exchange);
    if (path == "/v1/messages/count_tokens") return count_tokens(context, *version, *body, exchange);
    if (path.rfind("/v1/responses/", 0) == 0) return stored_response(context, method, path, exchange);
    if (path == "/v1/embeddings") return prepare_embedding(context, version, *body, exchange);
    prepare(context, version, *body, endpoint, exchange);
  });
  if (!queued) {
    answer_error(context, *exchange, ApiError{503, "the server has too many requests waiting to be tokenized", "server_error", "", "overloaded", 1},
                 "prepare_queue_full");
  }
}

void Server::store_request(const RequestContext& context, HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  if (!options_.batch_api) {
    return answer_error(context, *exchange, ApiError{404, "this server keeps no files or batches: start it with --store-dir DIR",
                                                     "invalid_request_error", "", "not_found", 0}, "not_found");
  }
  auto held = std::make_shared<HttpRequest>(std::move(request));
  const bool queued = prepare_queue_.try_post([this, context, held, exchange] {
    const StoreAnswer done = options_.batch_api->handle(context.tenant, *held, context.path);
    exchange->post([this, context, exchange, done] { answer(context, *exchange, done.status, done.content_type, done.body, done.reason); });
  });
  if (!queued) {
    answer_error(context, *exchange, ApiError{503, "the server has too many requests waiting to be prepared", "server_error", "", "overloaded", 1},
                 "prepare_queue_full");
  }
}

void Server::run_batch_line(const PendingLine& line, std::shared_ptr<HttpExchange> exchange) {
  RequestContext context;
  context.request_id = line.request_id();
  context.client = "batch";
  context.tenant = line.tenant;
  context.method = "POST";
  const Route* route = find_route(line.url);
  context.path = route ? route->path : "other";
  context.arrived = Clock::now();
  context.batch = true;
  const Version version = versions_.current();
  if (draining_ || !ready_ || !version || stall_reason()) {
    return answer_error(context, *exchange, ApiError{503, "not now: the server is starting, draining, swapping or stalled", "server_error", "",
                                                     "unavailable", 1}, "batch_deferred");
  }
  context.version = version->label;
  HttpRequest request;
  request.method = "POST";
  request.target = line.url;
  request.body = line.body;
  request.remote_address = context.client;
  request.request_id = context.request_id;
  run(context, version, std::move(request), exchange);
}

void Server::handle_admin(const RequestContext& context, const HttpRequest& request, std::shared_ptr<HttpExchange> exchange) {
  if (context.path == std::string("/admin/trace") || context.path == std::string("/admin/debug")) {
    const AdminAnswer done = context.path == std::string("/admin/trace") ? admin_->trace(request.body) : admin_->debug(request.body);
    return answer(context, *exchange, done.status, "application/json", done.body, done.status == 200 ? "ok" : "refused");
  }
  if (request.method == "GET") {
    const AdminAnswer listed = admin_->list();
    return answer(context, *exchange, listed.status, "application/json", listed.body, "ok");
  }
  admin_->swap(request.body, context.tenant, [this, context, exchange](AdminAnswer done) {
    exchange->post([this, context, exchange, done] {
      answer(context, *exchange, done.status, "application/json", done.body, done.status == 200 ? "ok" : "swap_failed");
    });
  });
}

// On a prepare thread: the body to tokens, or the error that stops it.
void Server::prepare(const RequestContext& context, Version version, const std::string& body, Endpoint endpoint,
                     std::shared_ptr<HttpExchange> exchange) {
  const ModelVersion& v = *version;
  const bool chat = endpoint != Endpoint::completion;
  auto fail = [&](const ApiError& error, const char* reason) {
    exchange->post([this, context, exchange, error, reason = std::string(reason)] { answer_error(context, *exchange, error, reason); });
  };
  if (exchange->disconnected()) return;  // racy but harmless: start() checks again on the strand
  auto p = std::make_shared<Prepared>();
  p->version = version;
  if (endpoint == Endpoint::responses) {
    const ResponseHistory history = [&](const std::string& id) -> std::optional<std::string> {
      if (!options_.response_store) return std::nullopt;
      auto stored = options_.response_store->get(context.tenant, id);
      return stored ? std::optional<std::string>(stored->context_json) : std::nullopt;
    };
    auto turn = parse_responses_request(body, history);
    if (auto* error = std::get_if<ApiError>(&turn)) return fail(*error, "invalid");
    ResponsesRequest& t = std::get<ResponsesRequest>(turn);
    if (t.store && !options_.response_store) {
      if (t.store_asked) return fail(ApiError::invalid("store", "this server stores no responses: start it with --store-dir DIR"), "invalid");
      t.store = false;  // OpenAI's default, where there is nowhere to keep them
    }
    p->request = std::move(t.request);
    p->responses = Prepared::ResponsesTurn{t.previous_response_id, t.input_json, t.context_json, t.echo_json, t.store};
  } else {
    auto parsed = endpoint == Endpoint::messages ? parse_anthropic_request(body, false) : parse_completion_request(endpoint, body);
    if (auto* error = std::get_if<ApiError>(&parsed)) return fail(*error, "invalid");
    p->request = std::move(std::get<CompletionRequest>(parsed));
  }
  CompletionRequest& r = p->request;
  if (auto error = unknown_model(r.model)) return fail(*error, "model");
  if (chat && !v.chat_template) return fail(ApiError::invalid("messages", "this model has no chat template; use /v1/completions"), "invalid");
  p->params = generation_params(r, context.tenant);
  p->params.priority = context.priority();
  std::string gbnf = r.grammar, gbnf_field = r.grammar_field;
  if (chat && r.chat.tool_choice.mode != ToolChoice::Mode::none) {
    if (v.tool_call_format == ToolCallFormat::none) {
      return fail(ApiError::invalid("tools", "this model's chat template writes tool calls in no format dsinfer parses; start the "
                                             "server with --tool-call-format (deepseek-r1, deepseek-v3.1, hermes, llama3-json)"),
                  "invalid");
    }
    p->tool_calls = v.tool_call_format;
    if (r.chat.tool_choice.mode == ToolChoice::Mode::required || r.chat.tool_choice.mode == ToolChoice::Mode::named) {
      if (!gbnf.empty()) return fail(ApiError::invalid("tool_choice", "tool_choice required or named cannot be combined with " + gbnf_field), "invalid");
      auto calls = tool_choice_gbnf(r.chat, v.tool_call_format);
      if (!calls.ok()) return fail(ApiError::invalid("tools", calls.message()), "invalid");
      gbnf = calls.take();
      gbnf_field = "tool_choice";
    }
  }
  if (!gbnf.empty()) {
    // A constrained reply ends where its grammar does: it cannot go on past the end token.
    if (r.ignore_eos) return fail(ApiError::invalid("ignore_eos", "ignore_eos cannot be combined with " + gbnf_field), "invalid");
    auto matcher = version->matcher_for(gbnf);
    if (!matcher.ok()) return fail(ApiError::invalid(gbnf_field, matcher.message()), "invalid");
    p->params.grammar = matcher.take();
  }
  const auto outside = [&](int32_t token) { return token >= v.tokenizer->vocab().n_tokens(); };
  const auto outside_error = [&](const char* field, int32_t token) {
    return ApiError::invalid(field, "token id " + std::to_string(token) + " is outside the vocabulary of " +
                                        std::to_string(v.tokenizer->vocab().n_tokens()));
  };
  for (const auto& [token, bias] : r.sampling.logit_bias) {
    if (outside(token)) return fail(outside_error("logit_bias", token), "invalid");
  }
  for (int32_t token : r.stop_token_ids) {
    if (outside(token)) return fail(outside_error("stop_token_ids", token), "invalid");
  }
  // A text of B bytes is at least B / max_token_bytes tokens: one that can
  // never fit is refused before the tokenizer spends time and memory on it.
  // The tokenized prompt is admitted on the strand, just before it is
  // submitted (Server::start).
  const auto too_long = [&](const std::string& text) {
    const Admit admit = v.engine->admit_at_least(v.min_tokens(text), p->params);
    if (admit.fits()) return false;
    fail(admission_error(admit, refused_field(r, admit)), admission_reason(admit));
    return true;
  };
  if (chat) {
    auto text = v.chat_template->render(r.chat.input, v.special_tokens);
    if (!text.ok()) return fail(ApiError::invalid("messages", text.message()), "invalid");
    if (too_long(text.value())) return;
    p->prompt = v.tokenizer->encode(text.value(), false, true);
    if (v.chat_template->has_reasoning()) p->reasoning_open = opens_reasoning(text.value());
    // A reasoning model thinks freely; its answer after </think> is what is constrained.
    if (p->params.grammar && p->reasoning_open.value_or(false)) p->params.grammar->start_after("</think>");
    p->prompt_text = std::move(text.value());
  } else if (r.prompt_is_tokens) {
    p->prompt = r.prompt_tokens;
    for (int32_t t : p->prompt) {
      if (t >= int32_t(v.tokenizer->vocab().tokens.size())) {
        return fail(ApiError::invalid("prompt", "token id " + std::to_string(t) + " is outside the vocabulary"), "invalid");
      }
    }
    if (r.echo) p->prompt_text = v.tokenizer->decode(p->prompt, false);  // what echo returns
  } else {
    if (too_long(r.prompt_text)) return;
    p->prompt = v.tokenizer->encode(r.prompt_text, true, true);
    p->prompt_text = r.prompt_text;
  }
  if (p->prompt.empty()) return fail(ApiError::invalid(chat ? "messages" : "prompt", "the prompt is empty"), "invalid");
  exchange->post([this, context, p, exchange] { start(context, p, exchange); });
}

std::optional<ApiError> Server::unknown_model(const std::string& asked) const {
  if (asked.empty() || asked == options_.model_name) return std::nullopt;
  return ApiError{404, "the model '" + asked.substr(0, 128) + "' does not exist; this server serves '" + options_.model_name + "'",
                  "invalid_request_error", "model", "model_not_found", 0};
}

std::optional<std::string> Server::stall_reason() const {
  if (options_.ranks) {
    if (auto fault = options_.ranks->fault()) return "tensor parallel: " + *fault;
  }
  for (const Version& v : versions_.live()) {
    const Engine::Progress p = v->engine->progress();
    const double bound = options_.stall_timeout_seconds > 0 ? options_.stall_timeout_seconds : std::max(10.0, 10.0 * p.longest_step_seconds);
    if (!p.busy || p.seconds_without_progress <= bound) continue;
    char reason[200];
    std::snprintf(reason, sizeof reason, "the engine of version '%s' has had work for %.1f s without finishing a step (bound %.1f s)",
                  v->label.substr(0, 64).c_str(), p.seconds_without_progress, bound);
    return std::string(reason);
  }
  return std::nullopt;
}

// On a prepare thread: a stored response, its input items, or its deletion, for its own tenant only.
void Server::stored_response(const RequestContext& context, const std::string& method, const std::string& path,
                             std::shared_ptr<HttpExchange> exchange) {
  const std::string rest = path.substr(std::strlen("/v1/responses/"));
  const size_t slash = rest.find('/');
  const std::string id = rest.substr(0, slash);
  const bool items = slash != std::string::npos;
  auto reply = [&](int status, const std::string& body, const char* reason) {
    exchange->post([this, context, exchange, status, body, reason = std::string(reason)] {
      answer(context, *exchange, status, "application/json", body, reason);
    });
  };
  const ApiError missing{404, "no stored response '" + id.substr(0, 128) + "'", "invalid_request_error", "id", "not_found", 0};
  if (!options_.response_store) return reply(404, ApiError{404, "this server stores no responses (--store-dir)", "invalid_request_error", "id",
                                                           "not_found", 0}.json(), "not_found");
  if (method == "DELETE") {
    if (!options_.response_store->remove(context.tenant, id)) return reply(404, missing.json(), "not_found");
    return reply(200, dump(json{{"id", id}, {"object", "response"}, {"deleted", true}}), "ok");
  }
  const auto stored = options_.response_store->get(context.tenant, id);
  if (!stored) return reply(404, missing.json(), "not_found");
  if (!items) return reply(200, stored->response_json, "ok");
  const json data = json::parse(stored->input_json);
  const json list = {{"object", "list"}, {"data", data}, {"first_id", data.empty() ? json() : data.front().value("id", json())},
                     {"last_id", data.empty() ? json() : data.back().value("id", json())}, {"has_more", false}};
  reply(200, dump(list), "ok");
}

// On a prepare thread: Anthropic's count_tokens, the prompt /v1/messages would run.
void Server::count_tokens(const RequestContext& context, const ModelVersion& v, const std::string& body, std::shared_ptr<HttpExchange> exchange) {
  auto fail = [&](const ApiError& error, const char* reason) {
    exchange->post([this, context, exchange, error, reason = std::string(reason)] { answer_error(context, *exchange, error, reason); });
  };
  auto parsed = parse_anthropic_request(body, true);
  if (auto* error = std::get_if<ApiError>(&parsed)) return fail(*error, "invalid");
  const CompletionRequest& r = std::get<CompletionRequest>(parsed);
  if (auto error = unknown_model(r.model)) return fail(*error, "model");
  if (!v.chat_template) return fail(ApiError::invalid("messages", "this model has no chat template"), "invalid");
  auto text = v.chat_template->render(r.chat.input, v.special_tokens);
  if (!text.ok()) return fail(ApiError::invalid("messages", text.message()), "invalid");
  GenerationParams one_token;
  one_token.max_tokens = 1;
  if (const Admit admit = v.engine->admit_at_least(v.min_tokens(text.value()), one_token); !admit.fits()) {
    return fail(admission_error(admit, "messages"), admission_reason(admit));
  }
  const size_t n = v.tokenizer->encode(text.value(), false, true).size();
  exchange->post([this, context, exchange, reply = dump(json{{"input_tokens", n}})] { answer(context, *exchange, 200, "application/json", reply, "ok"); });
}

// On a prepare thread: /tokenize and /detokenize, in vLLM's shapes.
void Server::tokenize(const RequestContext& context, const ModelVersion& v, const std::string& body, bool detokenize,
                      std::shared_ptr<HttpExchange> exchange) {
  auto fail = [&](const ApiError& error, const char* reason) {
    exchange->post([this, context, exchange, error, reason = std::string(reason)] { answer_error(context, *exchange, error, reason); });
  };
  auto succeed = [&](const json& reply) {
    exchange->post([this, context, exchange, text = dump(reply)] { answer(context, *exchange, 200, "application/json", text, "ok"); });
  };
  const Vocab& vocab = v.tokenizer->vocab();
  if (detokenize) {
    auto parsed = parse_detokenize_request(body);
    if (auto* error = std::get_if<ApiError>(&parsed)) return fail(*error, "invalid");
    const DetokenizeRequest& r = std::get<DetokenizeRequest>(parsed);
    if (auto error = unknown_model(r.model)) return fail(*error, "model");
    for (int32_t t : r.tokens) {
      if (t >= vocab.n_tokens()) return fail(ApiError::invalid("tokens", "token id " + std::to_string(t) + " is outside the vocabulary"), "invalid");
    }
    return succeed(json{{"prompt", v.tokenizer->decode(r.tokens, true)}});
  }
  auto parsed = parse_tokenize_request(body);
  if (auto* error = std::get_if<ApiError>(&parsed)) return fail(*error, "invalid");
  const TokenizeRequest& r = std::get<TokenizeRequest>(parsed);
  if (auto error = unknown_model(r.model)) return fail(*error, "model");
  std::string text;
  if (r.prompt) {
    text = *r.prompt;
  } else {
    if (!v.chat_template) return fail(ApiError::invalid("messages", "this model has no chat template; tokenize a prompt"), "invalid");
    auto rendered = v.chat_template->render(r.chat.input, v.special_tokens);
    if (!rendered.ok()) return fail(ApiError::invalid("messages", rendered.message()), "invalid");
    text = std::move(rendered.value());
  }
  // A text that could never be a prompt (it is at least B / max_token_bytes
  // tokens) is refused before the tokenizer spends time and memory on it.
  GenerationParams one_token;
  one_token.max_tokens = 1;
  if (const Admit admit = v.engine->admit_at_least(v.min_tokens(text), one_token); !admit.fits()) {
    return fail(admission_error(admit, r.prompt ? "prompt" : "messages"), admission_reason(admit));
  }
  const std::vector<int32_t> tokens = v.tokenizer->encode(text, r.add_special_tokens, true);
  json reply = {{"count", tokens.size()}, {"max_model_len", v.engine->max_context()}, {"tokens", tokens}};
  if (r.return_token_strs) {
    json strs = json::array();
    for (int32_t t : tokens) strs.push_back(vocab.tokens[size_t(t)]);
    reply["token_strs"] = strs;
  }
  succeed(reply);
}

int64_t Server::cut_drain_short() {
  drain_cut_ = true;
  std::lock_guard lock(live_mutex_);
  for (const auto& [engine, id] : live_) engine->cancel(id);
  return int64_t(live_.size());
}

}  // namespace ds
