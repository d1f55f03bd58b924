#pragma once
// The last minutes of the pool's traffic, for the status page's plots: in
// buckets of 10 s, the requests the router answered (and how many were
// errors), and from the instances' scraped totals (instance_metrics.h) the
// tokens they generated and the mean TTFT and TPOT of the requests they
// finished in that bucket. Thread-safe.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "router/instance_metrics.h"

namespace ds {

class TrafficHistory {
 public:
  static constexpr int k_bucket_seconds = 10;
  static constexpr size_t k_buckets = 60;  // ten minutes

  // A request the router answered with `status` (5xx: an error).
  void add_request(int status);
  // An instance's totals as scraped now: the differences from its last scrape go to the current bucket.
  void add_scrape(const std::string& instance, const InstanceMetrics& metrics);
  // {"bucket_seconds": 10, "buckets": [{"start_unix_ms", "requests", "errors", "output_tokens", "ttft_mean_ms", "tpot_mean_ms"}, ...]}, oldest first
  std::string json() const;

 private:
  struct Bucket {
    int64_t start_unix_ms = 0;
    int64_t requests = 0, errors = 0;
    double output_tokens = 0, ttft_sum = 0, ttft_count = 0, tpot_sum = 0, tpot_count = 0;
  };
  Bucket& current_locked();

  mutable std::mutex mutex_;  // guards the fields below
  std::deque<Bucket> buckets_;
  std::map<std::string, InstanceMetrics> last_;  // each instance's previous scrape
};

}  // namespace ds
