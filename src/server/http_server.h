#pragma once
// HTTP/1.1 on Boost.Beast (request parsing) and Asio (sockets, timers):
// asynchronous, so a thousand open streams need no thousand threads. Beast and
// Asio stay inside http_server.cpp; the API layer sees only HttpRequest,
// HttpExchange and HttpService.
//
// A connection's life, with the deadline that bounds each wait (nginx's
// client_header_timeout, client_body_timeout, keepalive_timeout, send_timeout):
//
//   accept ──► head ──► check_head ──► body ──► handle ──► response ──► idle ──► head ...
//    │ over the   │ head_timeout │ refused:   │ body_timeout           │ keepalive_timeout
//    │ caps:      │ -> 408       │ respond,   │ -> 408                 │ -> close
//    │ close      │              │ close      │                        │
//
// Pipelined requests are read ahead and answered in order; reading ahead also
// notices a client that leaves while its response is being made (EOF). The
// server stops reading a connection while its unsent responses or queued
// requests pass their bounds, so a client that never reads costs bounded
// memory; a write that makes no progress for send_timeout ends the connection.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string target;  // path and query
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string remote_address;
  // The client's X-Request-Id when it is 1-128 printable characters, else one
  // made here; echoed in the response's X-Request-Id.
  std::string request_id;

  std::string header(const std::string& lower_case_name) const {
    auto it = headers.find(lower_case_name);
    return it == headers.end() ? std::string() : it->second;
  }
  std::string path() const { return target.substr(0, target.find('?')); }
};

// One request's response channel. Every method except post() must run on the
// connection's own strand: inside the handler, or inside a function given to
// post() or after().
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // Runs fn on the connection's strand; safe from any thread.
  virtual void post(std::function<void()> fn) = 0;
  // Runs fn on the strand after `delay` unless the response has ended.
  virtual void after(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
  // A whole response with Content-Length.
  virtual void respond(int status, const std::string& content_type, const std::string& body,
                       const HttpHeaders& extra = {}) = 0;
  // A chunked response: the head, any number of chunks, then the end.
  virtual void begin_stream(int status, const std::string& content_type, const HttpHeaders& extra = {}) = 0;
  virtual void write_chunk(const std::string& data) = 0;
  virtual void end_stream() = 0;
  // Called once, on the strand, if the client goes away before the response ends.
  virtual void on_disconnect(std::function<void()> fn) = 0;
  virtual bool disconnected() const = 0;
};

// A response the service gives instead of reading a request's body.
struct HttpRefusal {
  int status = 400;
  std::string body;  // application/json
  HttpHeaders headers;
  std::string reason;  // for the access log, e.g. "auth"
};

// What the server calls. check_head and handle run on a connection's strand
// (an I/O thread): they must not block. refused() may run on any I/O thread.
class HttpService {
 public:
  virtual ~HttpService() = default;
  // Before any of the body is read (request.body is empty): nullopt to go on.
  virtual std::optional<HttpRefusal> check_head(const HttpRequest& head) = 0;
  virtual void handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) = 0;
  // The HTTP layer answered a request by itself (malformed, too large, past a
  // deadline): one call per such request. (check_head's refusals are the
  // service's own to record.)
  virtual void refused(const HttpRequest& head, int status, const std::string& reason) = 0;
  // The body of such an answer: OpenAI's error shape unless the service speaks another API on that path.
  virtual std::string refusal_body(const HttpRequest& head, int status, const std::string& message) const;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port
  int n_threads = 2;
  size_t max_body_bytes = 8 << 20;
  size_t max_header_bytes = 64 << 10;
  std::chrono::milliseconds head_timeout{std::chrono::seconds(10)};       // from accept or first byte to a whole head
  std::chrono::milliseconds body_timeout{std::chrono::seconds(60)};       // from the head to the whole body
  std::chrono::milliseconds keepalive_timeout{std::chrono::seconds(60)};  // idle between requests
  std::chrono::milliseconds send_timeout{std::chrono::seconds(60)};       // one write making no progress
  // Open connections in all and per client address; beyond them a new
  // connection is closed at once. 0: derived from the open-file limit (all:
  // the limit less 64 kept for files; per address: a quarter of all).
  int max_connections = 0;
  int max_connections_per_address = 0;
  size_t max_unsent_bytes = 1 << 20;   // responses queued on a connection before it stops reading
  size_t max_unsent_stream_bytes = 16 << 20;  // a stream past this is a client that does not read: closed
  int max_pipelined = 16;              // requests read ahead on one connection
};

struct HttpServerStats {
  int64_t open_connections = 0;
  int64_t refused_connections = 0;  // closed at accept: over a cap
  int64_t accept_backoffs = 0;      // accept failed for want of descriptors or memory
};

class HttpServer {
 public:
  static Result<std::unique_ptr<HttpServer>> start(const HttpServerOptions& options, HttpService& service);
  virtual ~HttpServer() = default;
  virtual uint16_t port() const = 0;
  // The caps in force (after deriving the defaults).
  virtual int max_connections() const = 0;
  virtual int max_connections_per_address() const = 0;
  virtual HttpServerStats stats() const = 0;
  // Calls fn (on a server thread) when SIGTERM, SIGINT or SIGUSR1 (what mpirun
  // hands to every rank of a job: cli/tensor_parallel_ranks.h) arrives.
  virtual void on_shutdown_signal(std::function<void(int signal)> fn) = 0;
  // Closes the listening socket and idle connections at once; a connection
  // answering a request finishes that answer and then closes, for up to
  // `grace` in all. Then closes what is left and returns once the server
  // threads have stopped. Call it from a thread of one's own, not a server thread.
  virtual void stop(std::chrono::milliseconds grace) = 0;
  // Blocks until stop() is called.
  virtual void wait() = 0;
};

// The reason phrase of a status code.
const char* http_reason(int status);

// Parses one request from raw bytes with the server's parser and limits (no
// socket): the fuzz target's way in. An error says what was wrong.
Result<HttpRequest> parse_http_request(const std::string& bytes, const HttpServerOptions& options);

}  // namespace ds
