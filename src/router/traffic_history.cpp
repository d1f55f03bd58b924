#include "router/traffic_history.h"

#include <nlohmann/json.hpp>

namespace ds {

TrafficHistory::Bucket& TrafficHistory::current_locked() {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const int64_t start = now - now % (k_bucket_seconds * 1000);
  if (buckets_.empty() || buckets_.back().start_unix_ms != start) {
    buckets_.push_back(Bucket{start});
    while (buckets_.size() > k_buckets) buckets_.pop_front();
  }
  return buckets_.back();
}

void TrafficHistory::add_request(int status) {
  std::lock_guard lock(mutex_);
  Bucket& b = current_locked();
  ++b.requests;
  if (status >= 500) ++b.errors;
}

void TrafficHistory::add_scrape(const std::string& instance, const InstanceMetrics& m) {
  std::lock_guard lock(mutex_);
  auto it = last_.find(instance);
  // The first scrape, or one after a restart (its totals began again): nothing to difference.
  if (it != last_.end() && m.requests_finished >= it->second.requests_finished && m.generation_tokens >= it->second.generation_tokens) {
    const InstanceMetrics& p = it->second;
    Bucket& b = current_locked();
    b.output_tokens += m.generation_tokens - p.generation_tokens;
    b.ttft_sum += m.ttft_seconds_sum - p.ttft_seconds_sum;
    b.ttft_count += m.ttft_count - p.ttft_count;
    b.tpot_sum += m.tpot_seconds_sum - p.tpot_seconds_sum;
    b.tpot_count += m.tpot_count - p.tpot_count;
  }
  last_[instance] = m;
}

std::string TrafficHistory::json() const {
  std::lock_guard lock(mutex_);
  nlohmann::json buckets = nlohmann::json::array();
  for (const Bucket& b : buckets_) {
    buckets.push_back({{"start_unix_ms", b.start_unix_ms},
                       {"requests", b.requests},
                       {"errors", b.errors},
                       {"output_tokens", b.output_tokens},
                       {"ttft_mean_ms", b.ttft_count > 0 ? nlohmann::json(1e3 * b.ttft_sum / b.ttft_count) : nlohmann::json(nullptr)},
                       {"tpot_mean_ms", b.tpot_count > 0 ? nlohmann::json(1e3 * b.tpot_sum / b.tpot_count) : nlohmann::json(nullptr)}});
  }
  return nlohmann::json{{"bucket_seconds", k_bucket_seconds}, {"buckets", buckets}}.dump();
}

}  // namespace ds
