#pragma once
// The OpenAI-compatible API over the engine: routes, admission in the order
// key -> tenant -> rate buckets -> queue limit and KV watermark, the mapping
// of requests to engine requests and of engine streams to JSON and SSE, the
// access log and the metrics. Runs on the HTTP server's threads; the engine
// has its own.

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "server/admission.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "tokenizer/chat_template.h"

namespace ds {

struct ServerOptions {
  std::string model_name;
  int64_t max_context = 4096;  // prompt plus output
  int32_t page_tokens = 16;
  int32_t max_in_flight = 64;  // generation requests held open (running + waiting); more: 503
  double kv_reserve = 0.05;    // fraction of the pool kept free beyond a new prompt's pages
  std::chrono::milliseconds request_timeout{std::chrono::minutes(10)};
  bool log_prompts = false;
};

class Server {
 public:
  Server(Engine& engine, const Tokenizer& tokenizer, std::optional<ChatFormat> chat_format, Admission& admission,
         const ServerOptions& options);
  ~Server();

  void handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange);
  void set_ready(bool ready) { ready_ = ready; }
  // Stop taking generation requests (503) and report not ready; those in flight go on.
  void start_draining() { draining_ = true; }
  int64_t in_flight() const { return in_flight_; }

 private:
  struct Generation;
  void generate(const HttpRequest& request, std::shared_ptr<HttpExchange> exchange, const std::string& tenant, bool chat);
  void reply(HttpExchange& exchange, const std::string& path, int status, const std::string& content_type,
             const std::string& body, const HttpHeaders& headers = {});
  void reply_error(HttpExchange& exchange, const std::string& path, const struct ApiError& error);

  Engine& engine_;
  const Tokenizer& tokenizer_;
  std::optional<ChatFormat> chat_format_;
  Admission& admission_;
  ServerOptions options_;
  Metrics metrics_;
  std::atomic<bool> ready_{false}, draining_{false};
  std::atomic<int64_t> in_flight_{0}, next_id_{1};
};

}  // namespace ds
