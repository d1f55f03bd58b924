#pragma once
// One JSON line per HTTP request, refusals included: what an operator greps
// after an incident. Never the API key; the prompt only when asked for
// (--log-prompts). Lines go to the log sink as "access {...}".

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace ds {

struct AccessRecord {
  std::string request_id;  // X-Request-Id, the client's or ours
  std::string client;      // remote address
  std::string tenant = "-";
  std::string method, path;
  int status = 0;
  std::string reason;  // a finish reason for generations, else why it was refused ("ok" for plain answers)
  std::string version;        // the model version that served it (empty: none did)
  std::string completion_id;  // chatcmpl-N / cmpl-N / msg_N, for generations
  std::string user;           // the request's own `user` (Anthropic: metadata.user_id): the client's word, not a tenant
  std::optional<int64_t> prompt_tokens, cached_tokens, output_tokens;
  std::optional<double> ttft_ms;
  double total_ms = 0;
  std::optional<std::string> prompt;  // only with --log-prompts
};

// The line's JSON, with an ISO-8601 UTC timestamp ("ts") of `now`.
std::string access_log_json(const AccessRecord& record, std::chrono::system_clock::time_point now);
void write_access_log(const AccessRecord& record);

}  // namespace ds
