#pragma once
// The router's HTTP/1.1 client to its instances, on Boost.Beast and Asio
// (confined to upstream_client.cpp as the server's are to http_server.cpp).
// send() forwards one request and hands back the response as it arrives —
// the head, then each piece of the body (SSE streams stay streams) — on the
// client's own threads; request() is a blocking, time-bounded call for probes.
// One connection per request: instances sit on loopback, where a connect
// costs microseconds, and no connection outlives a request it could confuse.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "server/http_server.h"

namespace ds {

struct Endpoint {
  std::string host;  // an IP address (or "localhost")
  uint16_t port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};

// The value of the header `name` (any case) in `headers`; "" when absent.
std::string header_value(const HttpHeaders& headers, const std::string& name);

// "http://127.0.0.1:8001" (no path) -> its endpoint.
Result<Endpoint> parse_endpoint_url(const std::string& url);

class UpstreamCall {
 public:
  virtual ~UpstreamCall() = default;
  // Ends the call (closing its connection, which the instance sees as a
  // client leaving); no handler runs after it returns... except one already running.
  virtual void cancel() = 0;
};

class UpstreamClient {
 public:
  struct Handlers {
    std::function<void(int status, const HttpHeaders& headers)> on_head;
    std::function<void(std::string piece)> on_body;
    std::function<void()> on_end;
    // Before on_head: nothing was received (the request may be retried elsewhere).
    std::function<void(const std::string& error, bool got_head)> on_error;
  };

  explicit UpstreamClient(int n_threads);
  ~UpstreamClient();  // stop()s
  // Ends every call and joins the client's threads; no handler runs after it.
  // Call it while whatever the handlers post to still exists.
  void stop();
  UpstreamClient(const UpstreamClient&) = delete;
  UpstreamClient& operator=(const UpstreamClient&) = delete;

  // Forwards method, target, body and `headers`; a connect that takes more
  // than connect_timeout fails as an error before the head.
  std::shared_ptr<UpstreamCall> send(const Endpoint& to, const std::string& method, const std::string& target,
                                     const HttpHeaders& headers, const std::string& body, Handlers handlers,
                                     std::chrono::milliseconds connect_timeout);

  // status and body of `method path` (a JSON `body` for POST), within `timeout`; blocking.
  static Result<std::pair<int, std::string>> request(const Endpoint& to, const std::string& method, const std::string& path,
                                                     const std::string& body, std::chrono::milliseconds timeout,
                                                     const HttpHeaders& headers = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds
