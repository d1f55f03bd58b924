#include "server/access_log.h"

#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>

#include "base/log.h"

namespace ds {

namespace {

std::string iso8601(std::chrono::system_clock::time_point now) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t seconds = std::time_t(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[96];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                utc.tm_hour, utc.tm_min, utc.tm_sec, int(ms % 1000));
  return text;
}

double tenths(double ms) { return std::round(ms * 10) / 10; }

}  // namespace

std::string access_log_json(const AccessRecord& r, std::chrono::system_clock::time_point now) {
  nlohmann::ordered_json line = {{"ts", iso8601(now)},   {"request_id", r.request_id}, {"client", r.client},
                                 {"tenant", r.tenant},   {"method", r.method},         {"path", r.path},
                                 {"status", r.status},   {"reason", r.reason}};
  if (!r.version.empty()) line["version"] = r.version;
  if (!r.completion_id.empty()) line["id"] = r.completion_id;
  if (!r.user.empty()) line["user"] = r.user;
  if (r.prompt_tokens) line["prompt_tokens"] = *r.prompt_tokens;
  if (r.cached_tokens) line["cached_tokens"] = *r.cached_tokens;
  if (r.output_tokens) line["output_tokens"] = *r.output_tokens;
  if (r.ttft_ms) line["ttft_ms"] = tenths(*r.ttft_ms);
  line["total_ms"] = tenths(r.total_ms);
  if (r.prompt) line["prompt"] = *r.prompt;
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void write_access_log(const AccessRecord& record) {
  DS_LOG_INFO("access %s", access_log_json(record, std::chrono::system_clock::now()).c_str());
}

}  // namespace ds
