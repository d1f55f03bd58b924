#pragma once
// The OpenAI-compatible API over the engine. Checks that cost nothing run on
// the request head, before the body is read (route, method, API key, drain,
// rate buckets, requests in flight); parsing the body, rendering the chat
// template and tokenizing run on a small bounded pool (prepare_threads), so
// the I/O threads only move bytes and /health answers at once whatever the
// requests; admission against the KV pool and the engine submit happen back
// on the connection's strand (generation.cpp: a request's choices from
// submit to the last byte). Every request leaves one access-log line.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "base/task_queue.h"
#include "engine/engine.h"
#include "server/access_log.h"
#include "server/admission.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "template/chat_template.h"
#include "template/tool_call_parser.h"
#include "grammar/token_matcher.h"

namespace ds {

struct EmbeddingRequest;

struct ServerOptions {
  std::string model_name;
  int64_t max_context = 4096;  // prompt plus output
  int32_t page_tokens = 16;
  double kv_reserve = 0.05;    // fraction of the pool kept free beyond a new prompt's pages
  std::chrono::milliseconds request_timeout{std::chrono::minutes(10)};
  bool log_prompts = false;
  bool metrics_public = false;  // /metrics without a key even with --api-keys
  int prepare_threads = 2;      // parse + template + tokenize, off the I/O threads
  size_t max_prepare_queue = 64;  // requests waiting for those threads; more: 503 (serve: --max-in-flight)
  ToolCallFormat tool_call_format = ToolCallFormat::none;  // how replies' tool calls are parsed (serve: --tool-call-format)
  GenerationParams::Pooling embedding_pooling = GenerationParams::Pooling::last;  // /v1/embeddings (serve: --embedding-pooling)
  int64_t embedding_width = 0;  // the model's hidden size: what an embedding holds
  double stall_timeout_seconds = 0.0;  // engine busy this long without progress: stalled (0: 10 x its longest step, at least 10 s)
};

class Server : public HttpService {
 public:
  Server(Engine& engine, const Tokenizer& tokenizer, std::optional<ChatTemplate> chat_template, Admission& admission,
         const ServerOptions& options);
  ~Server() override;

  // HttpService
  std::optional<HttpRefusal> check_head(const HttpRequest& head) override;
  void handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) override;
  void refused(const HttpRequest& head, int status, const std::string& reason) override;

  void set_ready(bool ready) { ready_ = ready; }
  // Stop taking generation requests (503) and report not ready; those in flight go on.
  void start_draining() { draining_ = true; }
  int64_t in_flight() const { return admission_.in_flight(); }
  // Why the engine counts as stalled (it has work and no step has finished
  // within the bound), or nullopt. Never waits on the engine thread.
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
    std::chrono::steady_clock::time_point arrived;
  };

  RequestContext context_of(const HttpRequest& head) const;
  std::optional<HttpRefusal> refuse_head(const RequestContext& context, const ApiError& error, const std::string& reason);
  void prepare(const RequestContext& context, const std::string& body, bool chat, std::shared_ptr<HttpExchange> exchange);
  void start(const RequestContext& context, std::shared_ptr<Prepared> prepared, std::shared_ptr<HttpExchange> exchange);
  void tokenize(const RequestContext& context, const std::string& body, bool detokenize, std::shared_ptr<HttpExchange> exchange);
  // /v1/embeddings: parsed and tokenized on a prepare thread, then admitted and run (embedding.cpp).
  void prepare_embedding(const RequestContext& context, const std::string& body, std::shared_ptr<HttpExchange> exchange);
  void start_embedding(const RequestContext& context, std::shared_ptr<EmbeddingRequest> request,
                       std::shared_ptr<std::vector<std::vector<int32_t>>> inputs, std::shared_ptr<HttpExchange> exchange);
  // The 404 for a request naming a model this server does not serve (an empty name means this one).
  std::optional<ApiError> unknown_model(const std::string& asked) const;
  // The fewest tokens `text` can encode to (its bytes / the longest token's).
  int64_t min_tokens(const std::string& text) const;
  // Sends a whole response and writes its access-log line.
  void answer(const RequestContext& context, HttpExchange& exchange, int status, const std::string& content_type,
              const std::string& body, const std::string& reason, const HttpHeaders& headers = {});
  void answer_error(const RequestContext& context, HttpExchange& exchange, const ApiError& error, const std::string& reason);
  AccessRecord access_record(const RequestContext& context, int status, const std::string& reason) const;
  void log_access(const RequestContext& context, int status, const std::string& reason);
  ApiError in_flight_error(Refusal refusal) const;
  void count_request(const std::string& path, int status);
  bool may_read_metrics(const HttpRequest& head) const;

  Engine& engine_;
  const Tokenizer& tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  ChatSpecialTokens special_tokens_;
  // Constrained output: the vocabulary trie (built at the first grammar) and
  // a matcher per recent grammar text, copied for each request so that
  // requests with the same grammar share its cache of masks.
  Result<grammar::TokenMatcher> matcher_for(const std::string& gbnf);
  std::mutex grammar_mutex_;
  std::shared_ptr<const grammar::VocabTrie> vocab_trie_;
  std::vector<std::pair<std::string, grammar::TokenMatcher>> recent_grammars_;  // most recent last
  Admission& admission_;
  ServerOptions options_;
  Metrics metrics_;
  std::function<HttpServerStats()> connection_stats_;
  std::atomic<bool> ready_{false}, draining_{false}, drain_cut_{false};
  std::atomic<int64_t> next_id_{1};
  std::mutex live_mutex_;
  std::unordered_set<int64_t> live_;  // engine stream ids of the generations running
  TaskQueue prepare_queue_;  // last: its threads stop before the members they use go
};

}  // namespace ds
