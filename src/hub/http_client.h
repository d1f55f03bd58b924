#pragma once
// HTTP(S) GETs for the hub client, over libcurl with the system's CA store
// (or the bundle $CURL_CA_BUNDLE or $SSL_CERT_FILE names), peers verified:
// a small body read whole (the API's JSON), or a body streamed into a sink
// from a byte offset (a Range request, for resuming a download). Redirects
// are followed (the hub sends large files to a CDN host; the token is not
// passed on to another host). A transfer that stalls is cut, not waited on.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

struct HttpReply {
  long status = 0;
  std::map<std::string, std::string> headers;  // of the last response (after redirects); names lowercased
  std::string body;                            // a GET's whole body (not with a sink)
  std::string transport_error;                 // set when no complete response came (refused, cut, stalled)
  std::string header(const std::string& name) const;
};

class HttpClient {
 public:
  // headers: "Name: value" lines sent with every request.
  explicit HttpClient(std::vector<std::string> headers);
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  ~HttpClient();

  // The whole body, at most max_body bytes (more is a transport error).
  HttpReply get(const std::string& url, size_t max_body = size_t(64) << 20);
  // The body from byte `offset` on (a Range request when offset > 0), handed
  // to `sink` with the status as it comes, only when the status is 200 (the
  // whole file, whatever the Range) or 206; a false from sink stops the
  // transfer (a transport error). `progress` sees the bytes received in this
  // transfer.
  using Sink = std::function<bool(long status, const char* data, size_t n)>;
  HttpReply download(const std::string& url, int64_t offset, const Sink& sink, const std::function<void(int64_t)>& progress);

 private:
  HttpReply perform(const std::string& url, int64_t offset, const Sink& sink,
                    const std::function<void(int64_t)>& progress, size_t max_body);
  std::vector<std::string> headers_;
  void* curl_ = nullptr;  // CURL*, reused: its connection stays open between requests
};

}  // namespace ds
