#include "router/instance_metrics.h"

#include <cstdlib>
#include <map>
#include <sstream>

namespace ds {

InstanceMetrics parse_instance_metrics(const std::string& text) {
  InstanceMetrics m;
  const std::map<std::string, double*> wanted = {
      {"dsinfer:num_requests_running", &m.running},
      {"dsinfer:num_requests_waiting", &m.waiting},
      {"dsinfer:kv_cache_usage_perc", &m.kv_usage},
      {"dsinfer:kv_pages_cached", &m.kv_pages_cached},
      {"dsinfer:kv_pages_total", &m.kv_pages_total},
      {"dsinfer:request_success_total", &m.requests_finished},
      {"dsinfer:generation_tokens_total", &m.generation_tokens},
      {"dsinfer:time_to_first_token_seconds_sum", &m.ttft_seconds_sum},
      {"dsinfer:time_to_first_token_seconds_count", &m.ttft_count},
      {"dsinfer:time_per_output_token_seconds_sum", &m.tpot_seconds_sum},
      {"dsinfer:time_per_output_token_seconds_count", &m.tpot_count},
  };
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos) continue;
    const auto it = wanted.find(line.substr(0, name_end));
    if (it == wanted.end()) continue;
    const size_t value_at = line.rfind(' ');
    char* end = nullptr;
    const double value = std::strtod(line.c_str() + value_at + 1, &end);
    if (end != line.c_str() + value_at + 1) *it->second += value;
  }
  return m;
}

}  // namespace ds
