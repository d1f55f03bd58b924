// libFuzzer target: any bytes a client can send, through the server's HTTP
// parser and limits, then the mapping of the body to a completion request
// (both endpoints) and the compiling of its grammar, must give a request or an
// error, never a crash, a hang or a huge allocation.

#include <cstddef>
#include <cstdint>
#include <string>

#include "grammar/grammar.h"
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
  for (const ds::Endpoint endpoint : {ds::Endpoint::chat, ds::Endpoint::completion}) {
    auto parsed = ds::parse_completion_request(endpoint, body);
    // A client's grammar (GBNF, or JSON Schema made GBNF) is compiled as the server would.
    if (auto* r = std::get_if<ds::CompletionRequest>(&parsed); r && !r->grammar.empty()) (void)ds::grammar::Grammar::from_gbnf(r->grammar);
  }
  return 0;
}
