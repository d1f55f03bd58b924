#include "router/instance_metrics.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "router/traffic_history.h"

namespace ds {
namespace {

const char* k_text =
    "# HELP dsinfer:num_requests_running Requests in the engine's running set.\n"
    "# TYPE dsinfer:num_requests_running gauge\n"
    "dsinfer:num_requests_running 3\n"
    "dsinfer:num_requests_waiting 2\n"
    "dsinfer:kv_cache_usage_perc 0.25\n"
    "dsinfer:request_success_total{finished_reason=\"stop\"} 10\n"
    "dsinfer:request_success_total{finished_reason=\"length\"} 5\n"
    "dsinfer:generation_tokens_total 400\n"
    "dsinfer:time_to_first_token_seconds_bucket{le=\"0.1\"} 15\n"
    "dsinfer:time_to_first_token_seconds_sum 1.5\n"
    "dsinfer:time_to_first_token_seconds_count 15\n"
    "dsinfer:num_requests_running_other 99\n";

TEST(InstanceMetrics, SumsEachMetricsSeries) {
  const InstanceMetrics m = parse_instance_metrics(k_text);
  EXPECT_EQ(m.running, 3);
  EXPECT_EQ(m.waiting, 2);
  EXPECT_EQ(m.kv_usage, 0.25);
  EXPECT_EQ(m.requests_finished, 15);  // every finish reason
  EXPECT_EQ(m.generation_tokens, 400);
  EXPECT_EQ(m.ttft_seconds_sum, 1.5);
  EXPECT_EQ(m.ttft_count, 15);  // not the bucket's line
  EXPECT_EQ(m.tpot_count, 0);   // absent
  EXPECT_EQ(parse_instance_metrics("garbage\n{}\n").running, 0);
}

TEST(TrafficHistory, DifferencesOfTheTotalsGoToTheCurrentBucket) {
  TrafficHistory history;
  InstanceMetrics m = parse_instance_metrics(k_text);
  history.add_scrape("a", m);  // the first scrape: nothing to difference
  m.generation_tokens += 50;
  m.ttft_seconds_sum += 0.2;
  m.ttft_count += 2;
  history.add_scrape("a", m);
  InstanceMetrics restarted;  // a restarted instance's totals begin again: not a negative difference
  history.add_scrape("a", restarted);
  history.add_request(200);
  history.add_request(503);
  const auto j = nlohmann::json::parse(history.json());
  ASSERT_GE(j["buckets"].size(), 1u);
  const auto& last = j["buckets"].back();
  double tokens = 0;
  for (const auto& b : j["buckets"]) tokens += b["output_tokens"].get<double>();
  EXPECT_EQ(tokens, 50);
  EXPECT_EQ(last["requests"], 2);
  EXPECT_EQ(last["errors"], 1);
  if (j["buckets"].size() == 1) {  // (a bucket boundary may fall between the scrapes)
    EXPECT_NEAR(last["ttft_mean_ms"].get<double>(), 100.0, 1e-9);  // 0.2 s over 2 requests
  }
}

}  // namespace
}  // namespace ds
