#pragma once
// The OpenAI-compatible API over the engine. Checks that cost nothing run on
// the request head, before the body is read (route, method, API key, drain,
// rate buckets, requests in flight); parsing the body, rendering the chat
// template and tokenizing run on a small bounded pool (prepare_threads), so
// the I/O threads only move bytes and /health answers at once whatever the
// requests; admission against the KV pool and the engine submit happen back
// on the connection's strand (generation.cpp: a request's choices from
// submit to the last byte). Every request leaves one access-log line.
//
// Each request is bound, when it arrives, to the model version serving then
// (model_version.h) and holds it to its last byte; its responses name it
// (X-Model-Version, system_fingerprint) and so does its access-log line. The
// admin API (admin_api.h) swaps versions under the requests' feet.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <set>

#include "base/task_queue.h"
#include "engine/model_version.h"
#include "parallel/collective.h"
#include "server/access_log.h"
#include "server/admin_api.h"
#include "server/admission.h"
#include "server/api_error.h"
#include "server/completion_request.h"
#include "server/http_server.h"
#include "server/metrics.h"

namespace ds {

struct EmbeddingRequest;
struct PendingLine;
class BatchApi;
class ResponseStore;

struct ServerOptions {
  std::string model_name;  // what requests' `model` names, whatever the version serving it
  std::chrono::milliseconds request_timeout{std::chrono::minutes(10)};
  bool log_prompts = false;
  bool metrics_public = false;  // /metrics without a key even with --api-keys
  int prepare_threads = 2;      // parse + template + tokenize, off the I/O threads
  size_t max_prepare_queue = 64;  // requests waiting for those threads; more: 503 (serve: --max-in-flight)
  GenerationParams::Pooling embedding_pooling = GenerationParams::Pooling::last;  // /v1/embeddings (serve: --embedding-pooling)
  double stall_timeout_seconds = 0.0;  // engine busy this long without progress: stalled (0: 10 x its longest step, at least 10 s)
  // Tensor parallel: the ranks, whose fault() (a rank dead or stopped) makes
  // the instance stalled whatever its engine says; null in one process.
  const Collective* ranks = nullptr;
  ResponseStore* response_store = nullptr;  // --store-dir: stored Responses; none without it
  BatchApi* batch_api = nullptr;            // --store-dir: files and batches; none without it
};

// Where a batch line waits in the engine: after every online request (scheduler.h).
constexpr int32_t k_batch_priority = 1;

class Server : public HttpService {
 public:
  // `admin`: the admin API, or null when the instance has no --admin-keys.
  Server(ModelVersions& versions, Admission& admission, const ServerOptions& options, AdminApi* admin);
  ~Server() override;

  // HttpService
  std::optional<HttpRefusal> check_head(const HttpRequest& head) override;
  void handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) override;
  void refused(const HttpRequest& head, int status, const std::string& reason) override;
  std::string refusal_body(const HttpRequest& head, int status, const std::string& message) const override;

  // A batch line (batch_runner.h), on its exchange's strand: the request a
  // client would send, run as the batch's tenant at batch priority, outside
  // the tenants' in-flight limits (the runner bounds its own lines). A 503
  // means not now: the runner runs it again later.
  void run_batch_line(const PendingLine& line, std::shared_ptr<HttpExchange> exchange);

  void set_ready(bool ready) { ready_ = ready; }
  // Stop taking generation requests (503) and report not ready; those in flight go on.
  void start_draining() { draining_ = true; }
  int64_t in_flight() const { return admission_.in_flight(); }
  // Why an engine counts as stalled (it has work and no step has finished
  // within the bound; a tensor-parallel rank dead or stopped), or nullopt.
  // Never waits on an engine thread.
  std::optional<std::string> stall_reason() const;
  // When the drain time is up: every generation still running ends with an
  // error event (and [DONE] when streamed) and is logged as drain_timeout.
  // Returns how many were cut.
  int64_t cut_drain_short();
  // The HTTP server's connection counts, for /metrics.
  void set_connection_stats(std::function<HttpServerStats()> stats) { connection_stats_ = std::move(stats); }

 private:
  struct Generation;
  struct Embedding;
  struct Prepared;
  // Who asked what, from the head on: what the access log line needs.
  struct RequestContext {
    std::string request_id, client, tenant = "-", method, path;
    std::string version;  // the model version that took it, once one has
    std::chrono::steady_clock::time_point arrived;
    bool batch = false;   // a batch line: run_batch_line
    int32_t priority() const { return batch ? k_batch_priority : 0; }
  };

  RequestContext context_of(const HttpRequest& head) const;
  std::optional<HttpRefusal> refuse_head(const RequestContext& context, const ApiError& error, const std::string& reason);
  using Version = std::shared_ptr<ModelVersion>;
  // The routes whose body is prepared off the I/O threads, once a version has taken the request.
  void run(const RequestContext& context, Version version, HttpRequest request, std::shared_ptr<HttpExchange> exchange);
  // /v1/files and /v1/batches (batch_api.h), on a prepare thread.
  void store_request(const RequestContext& context, HttpRequest request, std::shared_ptr<HttpExchange> exchange);
  // A request's slot among the tenants' in flight (a batch line takes none).
  Refusal enter(const RequestContext& context) { return context.batch ? Refusal::none : admission_.enter(context.tenant); }
  void leave(const RequestContext& context) {
    if (!context.batch) admission_.leave(context.tenant);
  }
  void prepare(const RequestContext& context, Version version, const std::string& body, Endpoint endpoint, std::shared_ptr<HttpExchange> exchange);
  void start(const RequestContext& context, std::shared_ptr<Prepared> prepared, std::shared_ptr<HttpExchange> exchange);
  void tokenize(const RequestContext& context, const ModelVersion& version, const std::string& body, bool detokenize,
                std::shared_ptr<HttpExchange> exchange);
  // GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items: the tenant's stored responses.
  void stored_response(const RequestContext& context, const std::string& method, const std::string& path, std::shared_ptr<HttpExchange> exchange);
  // POST /v1/messages/count_tokens: the tokens of the prompt /v1/messages would run.
  void count_tokens(const RequestContext& context, const ModelVersion& version, const std::string& body, std::shared_ptr<HttpExchange> exchange);
  // The Authorization header, or for Anthropic's routes x-api-key as one ("Bearer KEY").
  static std::string api_key_header(const HttpRequest& head, const std::string& route_label);
  // /v1/embeddings: parsed and tokenized on a prepare thread, then admitted and run (embedding.cpp).
  void prepare_embedding(const RequestContext& context, Version version, const std::string& body, std::shared_ptr<HttpExchange> exchange);
  void start_embedding(const RequestContext& context, Version version, std::shared_ptr<EmbeddingRequest> request,
                       std::shared_ptr<std::vector<std::vector<int32_t>>> inputs, std::shared_ptr<HttpExchange> exchange);
  // GET and POST /admin/models (admin_api.h).
  void handle_admin(const RequestContext& context, const HttpRequest& request, std::shared_ptr<HttpExchange> exchange);
  // The 404 for a request naming a model this server does not serve (an empty name means this one).
  std::optional<ApiError> unknown_model(const std::string& asked) const;
  // Sends a whole response and writes its access-log line.
  void answer(const RequestContext& context, HttpExchange& exchange, int status, const std::string& content_type,
              const std::string& body, const std::string& reason, const HttpHeaders& headers = {});
  void answer_error(const RequestContext& context, HttpExchange& exchange, const ApiError& error, const std::string& reason);
  AccessRecord access_record(const RequestContext& context, int status, const std::string& reason) const;
  void log_access(const RequestContext& context, int status, const std::string& reason);
  ApiError in_flight_error(Refusal refusal) const;
  // The engine's refusal (Engine::admit) as the client sees it: 400 for never
  // fits (the offending field `param`), 503 for not now; and the access log's reason.
  static ApiError admission_error(const Admit& admit, const std::string& param);
  static const char* admission_reason(const Admit& admit);
  void count_request(const std::string& path, int status);
  bool may_read_metrics(const HttpRequest& head) const;

  ModelVersions& versions_;
  Admission& admission_;
  AdminApi* admin_;
  ServerOptions options_;
  Metrics metrics_;
  std::function<HttpServerStats()> connection_stats_;
  std::atomic<bool> ready_{false}, draining_{false}, drain_cut_{false};
  std::atomic<int64_t> next_id_{1};
  std::mutex live_mutex_;
  std::set<std::pair<Engine*, int64_t>> live_;  // the generations running: engine and stream id
  TaskQueue prepare_queue_;  // last: its threads stop before the members they use go
};

}  // namespace ds
