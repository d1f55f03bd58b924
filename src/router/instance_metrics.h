#pragma once
// What the router reads of an instance's own /metrics (Prometheus text, as
// `dsinfer serve` writes it): its load now (requests running and waiting, KV
// pages held and cached) and its monotonic totals (finished requests,
// generated tokens, TTFT and TPOT sums and counts), from which the traffic
// history takes differences.

#include <string>

namespace ds {

struct InstanceMetrics {
  double running = 0, waiting = 0;        // requests in the engine's running set / waiting for it
  double kv_usage = 0;                    // fraction of KV pages held by requests
  double kv_pages_cached = 0, kv_pages_total = 0;
  double requests_finished = 0;           // generation requests finished, every finish reason
  double generation_tokens = 0;
  double ttft_seconds_sum = 0, ttft_count = 0;
  double tpot_seconds_sum = 0, tpot_count = 0;
};

// Each field is the sum of its metric's series (labels aside); a metric the text lacks stays 0.
InstanceMetrics parse_instance_metrics(const std::string& prometheus_text);

}  // namespace ds
