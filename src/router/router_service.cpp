#include "router/router_service.h"

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "router/audited_request.h"
#include "router/prefix_index.h"
#include "router/status_page.h"
#include "server/access_log.h"
#include "server/api_error.h"

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr size_t k_max_buffered_body = 64 << 20;  // a non-streamed answer gathered before it is passed on
constexpr std::chrono::milliseconds k_connect_timeout{1000};

// "/admin/instances/ID/drain" -> (ID, "drain"); also "resume".
std::optional<std::pair<std::string, std::string>> admin_action(const std::string& path) {
  const std::string prefix = "/admin/instances/";
  if (path.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string rest = path.substr(prefix.size());
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash == 0) return std::nullopt;
  const std::string action = rest.substr(slash + 1);
  if (action != "drain" && action != "resume") return std::nullopt;
  return std::pair{rest.substr(0, slash), action};
}

// The text a request's prompt begins with, as far as the router can tell
// without the chat template: the messages' roles and contents in order, or
// the prompt; "" for anything else. Turns of a conversation extend it.
std::string prompt_key(const json& request) {
  if (!request.is_object()) return "";
  std::string key;
  if (request.contains("messages") && request["messages"].is_array()) {
    for (const json& m : request["messages"]) {
      if (!m.is_object()) break;
      key += m.value("role", "") + "\n";
      const json content = m.value("content", json());
      if (content.is_string()) {
        key += content.get<std::string>();
      } else if (content.is_array()) {
        for (const json& part : content) {
          if (part.is_object() && part.value("type", "") == "text") key += part.value("text", "");
        }
      }
      key += "\n";
    }
  } else if (request.contains("prompt")) {
    const json& prompt = request["prompt"];
    if (prompt.is_string()) key = prompt.get<std::string>();
    if (prompt.is_array()) {
      for (const json& t : prompt) key += t.is_number_integer() ? std::to_string(t.get<int64_t>()) + "," : "";
    }
  }
  return key;
}

// The access-log line of a request the router answers (the path cut to 64 bytes: any path reaches here).
AccessRecord access_record(const HttpRequest& request, int status, const std::string& reason) {
  AccessRecord record;
  record.request_id = request.request_id;
  record.client = request.remote_address;
  record.method = request.method.empty() ? "-" : request.method;
  record.path = request.path().substr(0, 64);
  record.status = status;
  record.reason = reason;
  return record;
}

// A request whose answer does not depend on chance: what the canary's agreement figures compare.
bool greedy(const json& request) {
  if (!request.is_object()) return false;
  const json temperature = request.value("temperature", json(nullptr)), top_k = request.value("top_k", json(nullptr));
  return (temperature.is_number() && temperature.get<double>() == 0.0) || (top_k.is_number_integer() && top_k.get<int64_t>() == 1);
}

// "/admin/canary" (GET) and its operator actions "/admin/canary/promote", "/admin/canary/rollback" (POST).
bool canary_path(const std::string& path) {
  return path == "/admin/canary" || path == "/admin/canary/promote" || path == "/admin/canary/rollback";
}

bool proxied(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The response headers an instance sets that mean something to the client.
HttpHeaders passed_headers(const HttpHeaders& upstream) {
  HttpHeaders out;
  for (const auto& [name, value] : upstream) {
    const std::string n = lower(name);
    if (n == "x-model-version" || n == "retry-after" || n == "www-authenticate" || n == "server-timing") out.emplace_back(name, value);
  }
  return out;
}

// What a request sends on to an instance: its id first, then the headers the
// instance reads. The key goes on: an instance with the router's keys (its
// children get them) knows the tenant, for its own limits and prefix-cache salt.
HttpHeaders upstream_headers(const HttpRequest& request) {
  HttpHeaders headers = {{"X-Request-Id", request.request_id}};
  for (const char* name : {"content-type", "accept", "authorization"}) {
    if (!request.header(name).empty()) headers.emplace_back(name, request.header(name));
  }
  return headers;
}

}  // namespace

// One client request on its way through the instances.
struct RouterService::Forward : std::enable_shared_from_this<Forward> {
  RouterService& service;
  HttpRequest request;
  std::shared_ptr<HttpExchange> exchange;
  std::string tenant;
  Clock::time_point arrived = Clock::now();
  std::set<std::string> tried;
  std::vector<uint64_t> prompt_blocks;  // the prompt's prefix blocks, for affinity
  CanaryRelease::Route route;           // the version that answers; whether the release audits it
  std::shared_ptr<AuditedRequest> audited;  // a canary or shadowed request's audit row
  std::shared_ptr<Instance> instance;
  std::shared_ptr<UpstreamCall> call;
  std::shared_ptr<Forward> self_hold;  // alive until finished; the handlers hold it weakly
  // On the exchange's strand:
  int attempt = 0;  // which instance's call the handlers' events belong to (a retry's predecessor may still post some)
  bool streaming = false;  // the answer is chunked (SSE): passed on piece by piece
  bool sent_head = false;  // the client has the head: from here a failure cannot be retried
  bool ended = false, gone = false;
  int status = 0;
  HttpHeaders headers;
  std::string content_type, body, last_error, server_timing;
  AnswerReader reader{false};  // read only for the release (route.stage >= 0)

  Forward(RouterService& s, HttpRequest r, std::shared_ptr<HttpExchange> e, std::string t)
      : service(s), request(std::move(r)), exchange(std::move(e)), tenant(std::move(t)) {}

  void log(int code, const std::string& reason) {
    AccessRecord record = access_record(request, code, reason);
    record.tenant = tenant;
    record.version = instance ? instance->spec().version : "";
    record.completion_id = instance ? "instance:" + instance->spec().id : "";
    record.total_ms = std::chrono::duration<double, std::milli>(Clock::now() - arrived).count();
    write_access_log(record);
  }

  void begin_stream() {
    if (sent_head) return;
    sent_head = true;
    exchange->begin_stream(status, content_type, headers);
  }

  void finish(int code, const std::string& reason) {
    if (ended) return;
    ended = true;
    const auto release = std::move(self_hold);  // this object may go when finish returns
    if (instance) --instance->outstanding;
    if (instance && code != 499) service.pool_.report_outcome(*instance, code);
    if (tenant != "-") service.admission_.leave(tenant);
    if (route.stage >= 0) {
      const std::string version = instance ? instance->spec().version : route.version;
      AuditAnswer answer = measured_answer(version, code, reader, arrived, server_timing, code == 200 ? "" : reason + ": " + last_error);
      if (!audited) {
        service.canary_->observe_stable(route, answer);
      } else if (version == service.canary_->stable_version()) {
        audited->stable_answered(std::move(answer));
      } else {
        audited->canary_answered(std::move(answer));
      }
    }
    service.count(instance ? instance->spec().id : "-", code);
    if (code != 499) service.history_.add_request(code);
    log(code, reason);
  }
};

RouterService::RouterService(InstancePool& pool, UpstreamClient& client, Admission& admission, std::optional<KeyFile> admin_keys,
                             CanaryRelease* canary, TrafficHistory& history)
    : pool_(pool), client_(client), admission_(admission), admin_keys_(std::move(admin_keys)), canary_(canary), history_(history) {}

void RouterService::refused(const HttpRequest& head, int status, const std::string& reason) {
  AccessRecord record = access_record(head, status, reason);
  record.path = "other";
  write_access_log(record);
}

std::optional<HttpRefusal> RouterService::check_head(const HttpRequest& head) {
  const std::string path = head.path();
  const auto refuse = [&](const ApiError& error, const std::string& reason) {
    write_access_log(access_record(head, error.status, reason));
    HttpHeaders headers;
    if (error.retry_after_seconds > 0) headers.emplace_back("Retry-After", std::to_string(error.retry_after_seconds));
    return HttpRefusal{error.status, error.json(), headers, reason};
  };
  const bool admin = path == "/admin/instances" || path == "/admin/history" || admin_action(path).has_value() || canary_path(path);
  if (path == "/metrics") {
    if (head.method != "GET") return refuse(ApiError{405, "/metrics takes GET", "invalid_request_error", "", "method_not_allowed", 0}, "method_not_allowed");
    if (!admission_.tenant(head.header("authorization"))) {
      return refuse(ApiError{401, "missing or unknown API key (send 'Authorization: Bearer KEY')", "authentication_error", "", "invalid_api_key", 0},
                    "auth");
    }
    return std::nullopt;
  }
  if (path == "/" || path == "/health" || path == "/ready" || admin) {
    const char* method = admin && path != "/admin/instances" && path != "/admin/history" && path != "/admin/canary" ? "POST" : "GET";
    if (head.method != method) {
      return refuse(ApiError{405, path.substr(0, 128) + " takes " + method, "invalid_request_error", "", "method_not_allowed", 0}, "method_not_allowed");
    }
    if (!admin) return std::nullopt;
    if (!admin_keys_) return refuse(ApiError{403, "the admin API is off: give the router 'admin_keys'", "permission_error", "", "admin_disabled", 0}, "auth");
    if (!admin_keys_->name_of(head.header("authorization"))) {
      return refuse(ApiError{401, "missing or unknown admin key", "authentication_error", "", "invalid_api_key", 0}, "auth");
    }
    return std::nullopt;
  }
  if (!proxied(path)) return refuse(ApiError{404, "no such path: " + path.substr(0, 128), "invalid_request_error", "", "not_found", 0}, "not_found");
  const auto tenant = admission_.tenant(head.header("authorization"));
  if (!tenant) {
    return refuse(ApiError{401, "missing or unknown API key (send 'Authorization: Bearer KEY')", "authentication_error", "", "invalid_api_key", 0},
                  "auth");
  }
  const AdmissionDecision rate = admission_.take_rate(*tenant);
  if (rate.refusal != Refusal::none) {
    return refuse(ApiError{429, std::string("over the ") + (rate.refusal == Refusal::tenant_rate ? "tenant's" : "router's") + " rate limit",
                           "rate_limit_error", "", "rate_limit_exceeded", int(rate.retry_after_seconds) + 1},
                  refusal_name(rate.refusal));
  }
  if (const Refusal full = admission_.would_enter(*tenant); full != Refusal::none) {
    return refuse(ApiError{503, "the router is at its limit of requests in flight", "server_error", "", "overloaded", 1}, refusal_name(full));
  }
  return std::nullopt;
}

void RouterService::handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  const std::string path = request.path();
  const auto plain = [&](int status, const std::string& body, const std::string& reason,
                         const std::string& content_type = "application/json") {
    exchange->respond(status, content_type, body);
    write_access_log(access_record(request, status, reason));
  };
  if (path == "/") {
    exchange->respond(200, "text/html; charset=utf-8", status_page_html(),
                      {{"Content-Security-Policy", status_page_policy()}, {"Cache-Control", "no-store"}});
    return write_access_log(access_record(request, 200, "ok"));
  }
  if (path == "/health") return plain(200, "{\"status\":\"ok\"}", "ok");
  if (path == "/admin/history") return plain(200, history_.json(), "ok");
  if (path == "/metrics") return plain(200, metrics_text(), "ok", "text/plain; version=0.0.4");
  if (path == "/ready") {
    const bool ready = pool_.any_healthy();
    json status = json::parse(pool_.status_json());
    json unhealthy = json::array();
    for (const json& i : status["instances"]) {
      if (i["state"] != "healthy") unhealthy.push_back({{"id", i["id"]}, {"state", i["state"]}, {"last_error", i["last_error"]}});
    }
    return plain(ready ? 200 : 503, json{{"status", ready ? "ready" : "no_healthy_instance"}, {"unhealthy", unhealthy}}.dump(), ready ? "ok" : "not_ready");
  }
  if (path == "/admin/instances") return plain(200, pool_.status_json(), "ok");
  if (canary_path(path)) {
    if (!canary_) return plain(404, ApiError{404, "no canary release is configured", "invalid_request_error", "", "not_found", 0}.json(), "not_found");
    if (path == "/admin/canary") return plain(200, canary_->status_json(), "ok");
    const std::string by = "operator:" + admin_keys_->name_of(request.header("authorization")).value_or("?");
    const Status done = path == "/admin/canary/promote" ? canary_->promote(by) : canary_->rollback(by);
    if (!done.ok()) return plain(409, ApiError{409, done.message(), "invalid_request_error", "", "conflict", 0}.json(), "conflict");
    return plain(200, canary_->status_json(), "ok");
  }
  if (const auto action = admin_action(path)) {
    if (!pool_.set_draining(action->first, action->second == "drain")) {
      return plain(404, ApiError{404, "no instance '" + action->first + "'", "invalid_request_error", "", "not_found", 0}.json(), "not_found");
    }
    return plain(200, json{{"id", action->first}, {"draining", action->second == "drain"}}.dump(), "ok");
  }
  const std::string tenant = admission_.tenant(request.header("authorization")).value_or("-");
  CanaryRelease::Route route;
  if (canary_) {
    const bool generation = path == "/v1/completions" || path == "/v1/chat/completions";
    auto routed = canary_->route(request.header(lower(canary_->header())), tenant, request.remote_address, generation);
    if (!routed.ok()) {
      return plain(400, ApiError{400, routed.message(), "invalid_request_error", canary_->header(), "invalid_header", 0}.json(), "invalid_header");
    }
    route = routed.take();
  }
  if (const Refusal full = admission_.enter(tenant); full != Refusal::none) {
    return plain(503, ApiError{503, "the router is at its limit of requests in flight", "server_error", "", "overloaded", 1}.json(),
                 refusal_name(full));
  }
  auto f = std::make_shared<Forward>(*this, std::move(request), exchange, tenant);
  f->self_hold = f;
  const json body = json::parse(f->request.body, nullptr, false);
  f->prompt_blocks = PrefixIndex::block_hashes(prompt_key(body));
  // Shadow copies are extra work the clients do not wait for: past a bound in
  // flight (a slow canary) a stable request is not copied, so they cannot pile up.
  if (route.shadow && shadows_in_flight_.fetch_add(1) >= k_max_shadows_in_flight) {
    --shadows_in_flight_;
    route.shadow = false;
  }
  f->route = route;
  if (route.canary || route.shadow) {
    AuditRequestRow row;
    row.request_id = f->request.request_id;
    row.tenant = tenant;
    row.path = path.substr(0, 64);
    row.greedy = greedy(body);
    if (canary_->keeps_input_of(tenant)) row.input = f->request.body.substr(0, AnswerReader::k_max_text);
    f->audited = std::make_shared<AuditedRequest>(*canary_, route, std::move(row));
  }
  if (route.shadow) {
    HttpHeaders headers = upstream_headers(f->request);
    headers[0].second += ".shadow";  // the instance's logs tell the copy from the request
    send_shadow(pool_, client_, f->audited, canary_->canary_version(), f->request.method, f->request.target, headers, f->request.body,
                f->prompt_blocks, shadows_in_flight_);
  }
  std::weak_ptr<Forward> weak = f;
  exchange->on_disconnect([weak] {
    if (auto g = weak.lock()) {
      g->gone = true;
      if (g->call) g->call->cancel();
      g->finish(499, "client_gone");
    }
  });
  forward(f);
}

void RouterService::count(const std::string& instance, int status) {
  std::lock_guard lock(metrics_mutex_);
  ++answered_[{instance, status}];
}

std::string RouterService::metrics_text() const {
  std::string text =
      "# HELP dsinfer_router:requests_total Requests answered, by the instance that answered (\"-\": none) and status.\n"
      "# TYPE dsinfer_router:requests_total counter\n";
  {
    std::lock_guard lock(metrics_mutex_);
    for (const auto& [key, n] : answered_) {
      text += "dsinfer_router:requests_total{instance=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
              std::to_string(n) + "\n";
    }
    text += "# HELP dsinfer_router:retries_total Requests sent on to another instance after one failed or refused them unanswered.\n"
            "# TYPE dsinfer_router:retries_total counter\ndsinfer_router:retries_total " + std::to_string(retries_) + "\n";
  }
  const json status = json::parse(pool_.status_json());
  const auto series = [&](const char* name, const char* type, const char* help, const auto& value_of) {
    text += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const json& i : status["instances"]) {
      text += std::string(name) + "{instance=\"" + i["id"].get<std::string>() + "\",version=\"" + i["version"].get<std::string>() + "\"} " +
              value_of(i) + "\n";
    }
  };
  series("dsinfer_router:instance_up", "gauge", "1 while the instance is healthy and not draining.",
         [](const json& i) { return std::string(i["state"] == "healthy" && !i["draining"].get<bool>() ? "1" : "0"); });
  series("dsinfer_router:instance_outstanding", "gauge", "Requests sent to the instance and not yet ended.",
         [](const json& i) { return std::to_string(i["outstanding"].get<int64_t>()); });
  series("dsinfer_router:instance_ejections_total", "counter", "Times the instance was ejected.",
         [](const json& i) { return std::to_string(i["ejections"].get<int64_t>()); });
  series("dsinfer_router:instance_restarts_total", "counter", "Times the router started the instance's process again.",
         [](const json& i) { return std::to_string(i["restarts"].get<int64_t>()); });
  series("dsinfer_router:instance_latency_probe_ms", "gauge", "Median of the last one-token completion probes (NaN before any).",
         [](const json& i) { return i["latency_ms"].is_null() ? std::string("NaN") : std::to_string(i["latency_ms"].get<double>()); });
  if (canary_) text += canary_->metrics_text();
  return text;
}

// On the exchange's strand: to the next instance, or the error when none is left.
void RouterService::forward(std::shared_ptr<Forward> f) {
  if (f->gone || f->ended) return;
  if (f->instance) {
    --f->instance->outstanding;
    std::lock_guard lock(metrics_mutex_);
    ++retries_;
  }
  f->instance = pool_.pick(f->route.version, f->tried, f->prompt_blocks);
  if (!f->instance && f->route.canary && f->route.version == canary_->canary_version()) {
    // No canary instance can take it: stable answers, and the canary is in error.
    f->audited->canary_unanswered(measured_answer(f->route.version, 0, AnswerReader(false), f->arrived, "",
                                                  f->tried.empty() ? "no healthy canary instance" : f->last_error));
    f->route.version = canary_->stable_version();
    f->instance = pool_.pick(f->route.version, f->tried, f->prompt_blocks);
  }
  if (!f->instance) {
    const bool none = f->tried.empty();
    const ApiError error{503, none ? "no instance is healthy" : "every instance failed this request; the last: " + f->last_error,
                         "server_error", "", "unavailable", 1};
    f->exchange->respond(503, "application/json", error.json(), {{"Retry-After", "1"}});
    f->instance = nullptr;
    return f->finish(503, none ? "no_healthy_instance" : "all_instances_failed");
  }
  f->tried.insert(f->instance->spec().id);
  ++f->instance->outstanding;
  const int attempt = ++f->attempt;
  const HttpHeaders headers = upstream_headers(f->request);
  std::weak_ptr<Forward> weak = f;
  std::shared_ptr<HttpExchange> exchange = f->exchange;
  const std::shared_ptr<Instance> instance = f->instance;
  UpstreamClient::Handlers handlers;
  handlers.on_head = [weak, exchange, attempt](int status, const HttpHeaders& upstream) {
    exchange->post([weak, status, upstream, attempt] {
      auto g = weak.lock();
      if (!g || g->ended || g->attempt != attempt) return;
      // A 503 before anything was passed on: another instance may take it.
      if (status == 503) {
        g->call->cancel();
        g->last_error = "instance '" + g->instance->spec().id + "' answered 503";
        return g->service.forward(g);
      }
      g->status = status;
      g->headers = passed_headers(upstream);
      g->headers.emplace_back("X-Dsinfer-Instance", g->instance->spec().id);
      g->content_type = header_value(upstream, "content-type");
      g->server_timing = header_value(upstream, "server-timing");
      // The head is passed on with the first piece of the body: an instance
      // that fails before sending any can still be replaced.
      g->streaming = lower(header_value(upstream, "transfer-encoding")).find("chunked") != std::string::npos;
      g->reader = AnswerReader(g->content_type.find("text/event-stream") != std::string::npos);
    });
  };
  handlers.on_body = [weak, exchange, attempt](std::string piece) {
    exchange->post([weak, piece = std::move(piece), attempt] {
      auto g = weak.lock();
      if (!g || g->ended || g->attempt != attempt || g->status == 0) return;
      if (g->streaming) {
        if (g->route.stage >= 0) g->reader.add(piece, Clock::now());
        g->begin_stream();
        return g->exchange->write_chunk(piece);
      }
      if (g->body.size() + piece.size() > k_max_buffered_body) {
        g->call->cancel();
        g->exchange->respond(502, "application/json",
                             ApiError{502, "the instance's answer is larger than the router passes on", "server_error", "", "bad_gateway", 0}.json());
        return g->finish(502, "upstream_too_large");
      }
      g->body += piece;
    });
  };
  handlers.on_end = [weak, exchange, attempt] {
    exchange->post([weak, attempt] {
      auto g = weak.lock();
      if (!g || g->ended || g->attempt != attempt || g->status == 0) return;
      if (g->streaming) {
        g->begin_stream();
        g->exchange->end_stream();
      } else {
        g->exchange->respond(g->status, g->content_type.empty() ? "application/json" : g->content_type, g->body, g->headers);
        if (g->route.stage >= 0) g->reader.add(g->body, Clock::now());
      }
      g->reader.finish();
      g->finish(g->status, "ok");
    });
  };
  handlers.on_error = [this, weak, exchange, instance, attempt](const std::string& error, bool got_head) {
    if (!got_head) pool_.report_unreachable(*instance, error);
    exchange->post([weak, error, got_head, attempt] {
      auto g = weak.lock();
      if (!g || g->ended || g->attempt != attempt) return;
      if (!g->sent_head) {
        g->last_error = "instance '" + g->instance->spec().id + "': " + error;
        g->status = 0;
        g->body.clear();
        return g->service.forward(g);
      }
      // Only a stream has sent its head before its end: it ends with an error event.
      const ApiError broken{502, "the instance serving this request failed: " + error, "server_error", "", "upstream_failed", 0};
      g->exchange->write_chunk("data: " + broken.json() + "\n\n");
      g->exchange->write_chunk("data: [DONE]\n\n");
      g->exchange->end_stream();
      g->finish(502, "upstream_failed");
    });
  };
  f->call = client_.send(f->instance->endpoint(), f->request.method, f->request.target, headers, f->request.body, std::move(handlers),
                         k_connect_timeout);
}

}  // namespace ds
