// libFuzzer target: any bytes a client can send, through the server's HTTP
// parser and limits, then the mapping of the body to a completion request
// (both endpoints), must give a request or an error, never a crash, a hang
// or a huge allocation.

#include <cstddef>
#include <cstdint>
#include <string>

#include "server/completion_request.h"
#include "server/http_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ds::HttpServerOptions options;
  options.max_body_bytes = 1 << 20;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto request = ds::parse_http_request(bytes, options);
  // A body alone is tried too, so the fuzzer reaches the JSON mapping without
  // first having to find a valid request head.
  const std::string& body = request.ok() ? request.value().body : bytes;
  (void)ds::parse_completion_request(ds::Endpoint::chat, body);
  (void)ds::parse_completion_request(ds::Endpoint::completion, body);
  return 0;
}
