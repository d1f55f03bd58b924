#pragma once
// HTTP/1.1 on Boost.Beast (request parsing) and Asio (sockets, timers):
// asynchronous, so a thousand open streams need no thousand threads. Beast and
// Asio stay inside http_server.cpp; the API layer sees only HttpRequest and
// HttpExchange. Keep-alive, pipelined requests (answered in order), chunked
// responses, a body limit (413), and client-gone detection while a response
// is in flight: the connection keeps reading, and EOF means the client left.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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

using HttpHandler = std::function<void(HttpRequest request, std::shared_ptr<HttpExchange> exchange)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port
  int n_threads = 2;
  size_t max_body_bytes = 8 << 20;
  std::chrono::seconds idle_timeout{60};  // keep-alive connections with nothing in flight
};

class HttpServer {
 public:
  static Result<std::unique_ptr<HttpServer>> start(const HttpServerOptions& options, HttpHandler handler);
  virtual ~HttpServer() = default;
  virtual uint16_t port() const = 0;
  // Calls fn (on a server thread) when SIGTERM or SIGINT arrives.
  virtual void on_shutdown_signal(std::function<void(int signal)> fn) = 0;
  // Closes the listening socket and every connection, then returns once the
  // server threads have stopped.
  virtual void stop() = 0;
  // Blocks until stop() is called.
  virtual void wait() = 0;
};

// The reason phrase of a status code.
const char* http_reason(int status);

}  // namespace ds
