#pragma once
// `dsinfer router --config FILE`: one JSON object. Every key is honoured or
// refused by name (README, "Router"):
//
//   {"listen": "127.0.0.1:8000",
//    "api_keys": "keys.txt", "admin_keys": "admin.txt",         (optional, as serve's flags)
//    "routing": "prefix_affinity" | "least_loaded" | "random",  (optional)
//    "instances": [{"id": "a", "version": "v1", "model": "M.gguf", "device": "cpu:0", "args": ["--ctx-size", "4096"]},
//                  {"id": "b", "version": "v2", "url": "http://127.0.0.1:8001", "kv_disk_dir": "/var/cache/kv"}],
//    "canary": {"stable": "v1", "canary": "v2", "stages": [1, 10, 50, 100], "min_samples": 50,   (optional)
//               "shadow_fraction": 0.1, "select": {...}, "thresholds": {...}},
//    "audit": {"path": "audit.db", "inputs": "none" | "all" | ["TENANT", ...]}}                   (with "canary")
//
// An instance with "model" is a child process the router starts (and
// restarts), `dsinfer serve` on loopback; one with "url" is fronted as it is.
// With "canary", every instance is of one of its two versions (canary_release.h).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "router/upstream_client.h"

namespace ds {

struct InstanceSpec {
  std::string id, version;
  std::string url;           // a fronted instance, or
  std::string model, device;  // a child's model file and --device ("" for none)
  std::vector<std::string> args;  // more `dsinfer serve` flags for the child
  // The prefix cache's disk tier it shares (its --kv-disk-dir; "" for none):
  // any instance of a directory reads back the prefixes the others wrote.
  std::string kv_disk_dir;
  bool child() const { return url.empty(); }
};

// When a figure of the canary breaches one of these, it is rolled back; when
// every one is within bounds over min_samples, it advances. A field set to
// null in the file is not judged.
struct CanaryThresholds {
  std::optional<double> max_error_rate_increase = 0.01;  // canary's 5xx/broken share minus stable's
  std::optional<double> max_ttft_p99_increase = 0.5;     // canary p99 / stable p99 - 1 (beyond latency_slack_ms)
  std::optional<double> max_tpot_p99_increase = 0.5;
  double latency_slack_ms = 20;                           // a p99 within this of stable's passes, whatever the ratio
  std::optional<double> min_exact_match = 0.9;            // share of greedy pairs answered identically
  std::optional<double> min_token_overlap = 0.95;         // mean word-token F1 of greedy pairs (answer_text.h)
};

struct CanaryConfig {
  std::string stable, canary;  // instance versions
  std::vector<int> stages = {1, 10, 50, 100};  // percent of the undyed traffic; rising, ending at 100
  int64_t min_samples = 50;                     // per figure and stage before it is judged
  double shadow_fraction = 0.1;                 // of the stable-served requests, copied to the canary
  // Dyed traffic, sent to the canary at every stage while it runs:
  std::string header = "X-Canary";              // "1": the canary, "0": stable, whatever the stage
  std::vector<std::string> tenants;
  std::vector<std::string> client_cidrs;        // "10.1.0.0/16"; IPv4 or IPv6
  CanaryThresholds thresholds;
};

struct AuditConfig {
  std::string path;  // the SQLite file
  // Whose inputs (prompts, messages) are stored with their answers: nobody's, everyone's, or these tenants'.
  bool all_inputs = false;
  std::vector<std::string> input_tenants;
};

struct RouterConfig {
  Endpoint listen{"127.0.0.1", 8000};
  std::string api_keys, admin_keys;  // files, as for serve; empty: none
  std::vector<InstanceSpec> instances;
  // How an instance is chosen: "prefix_affinity" (default: where the prompt's
  // prefix probably is, unless that instance is much busier than the least
  // busy), "least_loaded", or "random" (a baseline to measure the others against).
  std::string routing = "prefix_affinity";
  std::optional<CanaryConfig> canary;
  std::optional<AuditConfig> audit;  // present exactly when canary is

  static Result<RouterConfig> from_file(const std::string& path);
  static Result<RouterConfig> from_json(const std::string& text);
};

}  // namespace ds
