#pragma once
// The instances behind the router and what it knows of each. A prober thread
// asks every instance's /health and /ready every probe interval: an instance
// answers both 200 to be healthy; one that fails a probe, or that a forwarded
// request could not reach, is ejected at once. An ejected instance is probed
// again after a back-off that doubles (half-open) and readmitted when it
// answers ready; a child process that exits is started again, with none of its
// predecessor's record (latency samples, failed requests, metrics).
//
// Each probe of a ready instance also reads its /metrics: its own count of
// requests running and waiting and its KV usage (instance_metrics.h), for the
// routing rule and the status page, and its totals for the traffic history.
//
// Passive failure rule: an instance that failed 5 of the last 10 requests
// sent to it (5xx other than 503, or a stream that broke) is ejected, and
// readmitted only when ready and a one-token completion succeeds (its /ready
// may pass while its engine fails every request).
//
// Latency rule: every few rounds each instance also gets a one-token
// completion; an instance whose median of the last of these is well above
// the others' (3x their median and 250 ms more) is ejected while another is
// healthy, and readmitted only when ready and within that bound again.
//
//   starting ──(ready)──► healthy ──(probe or request fails)──► ejected ──(back-off, ready)──► healthy
//                                                                  └─(child exited)─► restarted ─► starting

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "router/instance_metrics.h"
#include "router/prefix_index.h"
#include "router/router_config.h"
#include "router/traffic_history.h"
#include "router/upstream_client.h"

namespace ds {

class Instance {
 public:
  enum class State { starting, healthy, ejected };

  explicit Instance(InstanceSpec spec) : spec_(std::move(spec)) {}
  const InstanceSpec& spec() const { return spec_; }
  Endpoint endpoint() const;
  State state() const;
  std::atomic<int64_t> outstanding{0};  // requests the router has sent and not seen end
  std::atomic<bool> draining{false};    // an operator's drain: sent nothing new, whatever its health

 private:
  friend class InstancePool;
  InstanceSpec spec_;
  mutable std::mutex mutex_;  // guards the fields below
  Endpoint endpoint_;
  State state_ = State::starting;
  pid_t pid_ = -1;  // a child's process
  int restarts_ = 0;
  int64_t ejections_ = 0;
  std::string last_error_;
  std::chrono::steady_clock::time_point next_probe_{};
  std::chrono::milliseconds backoff_{0};
  std::vector<double> latency_ms_;  // the last latency probes, oldest first
  bool slow_ = false;               // ejected by the latency rule
  std::optional<InstanceMetrics> metrics_;  // its /metrics at the last probe that read them
  double others_work_ = 0;                  // of its running and waiting then, what the router had not sent
  std::deque<bool> failed_;                 // the outcomes of its last requests (true: failed), oldest first
  bool failing_ = false;                    // ejected by the passive failure rule
};

const char* instance_state_name(Instance::State state);

class InstancePool {
 public:
  struct Options {
    std::string dsinfer;  // the binary children run
    std::chrono::milliseconds probe_interval{200};
    std::chrono::milliseconds probe_timeout{500};
    std::chrono::milliseconds max_backoff{5000};
    int latency_probe_every = 5;  // rounds between latency probes
    // The router's keys file: children get it too (each instance then knows
    // the tenant of every request, for its own limits and prefix-cache salt),
    // and the latency probe uses `probe_key`, one of its keys.
    std::string api_keys_file, probe_key;
    std::string routing = "prefix_affinity";  // router_config.h
    TrafficHistory* history = nullptr;         // fed each instance's scraped totals
  };

  InstancePool(std::vector<InstanceSpec> specs, Options options);
  ~InstancePool();  // stops probing; ends the children (SIGTERM, then SIGKILL after 30 s)
  // Starts the children and the prober.
  Status start();

  // A healthy instance of `version` ("": any) not in `tried` for a prompt of
  // these prefix blocks (prefix_index.h), by the routing rule, and records
  // the prompt there; null when there is none.
  std::shared_ptr<Instance> pick(const std::string& version, const std::set<std::string>& tried, const std::vector<uint64_t>& prompt_blocks);
  // A forwarded request could not reach it: ejected until a probe readmits it.
  void report_unreachable(Instance& instance, const std::string& error);
  // A forwarded request ended, answered with `status` (502 for a broken stream): the passive failure rule.
  void report_outcome(Instance& instance, int status);
  bool any_healthy() const;
  // POST /admin/instances/{id}/drain and /resume; false for an unknown id.
  bool set_draining(const std::string& id, bool draining);
  // {"instances": [{id, version, state, url, pid, outstanding, restarts, ejections, last_error, latency_ms,
  //                 metrics: {running, waiting, kv_usage, kv_pages_cached, kv_pages_total, requests_finished, generation_tokens} | null}]}
  std::string status_json() const;

 private:
  void probe_loop();
  void probe(Instance& instance, bool with_latency);
  void scrape_metrics(Instance& instance, const Endpoint& endpoint);
  // What an instance has to do: the router's requests outstanding there (a
  // live count) and the work other clients gave it, as of its last scrape
  // (its running and waiting beyond what the router had outstanding).
  static double load(const Instance& instance);
  static double kv_usage(const Instance& instance);  // 0 before its metrics are read
  // A one-token completion's milliseconds; nullopt when it fails.
  std::optional<double> latency_probe(const Endpoint& endpoint) const;
  // The latency bound from the healthy instances other than `instance`: 0 when there are none.
  double latency_bound(const Instance& instance) const;
  void eject_latency_outliers();
  void eject_locked(Instance& instance, const std::string& why);  // instance.mutex_ held
  Status spawn(Instance& instance);

  std::vector<std::shared_ptr<Instance>> instances_;
  Options options_;
  PrefixIndex prefixes_{1 << 16};  // 64 K blocks of 64 bytes per instance and per shared disk tier: 4 MiB of prompt text each
  std::mutex random_mutex_;
  std::mt19937_64 random_{std::random_device{}()};
  std::atomic<bool> stopping_{false};
  std::thread prober_;
};

}  // namespace ds
