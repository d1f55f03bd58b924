#pragma once
// The canary's promotion policy, a pure function of what one stage observed:
// each figure (error rate, TTFT and TPOT p99, exact match and token overlap of
// greedy answer pairs) is judged once both versions have min_samples of it;
// any judged figure over its threshold rolls the release back at once, and
// the stage advances when every figure the thresholds name is judged and
// within bounds. Otherwise it holds, saying what it waits for.

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "router/router_config.h"

namespace ds {

// What one version answered over a stage.
struct VersionFigures {
  static constexpr size_t k_max_latencies = 10000;  // the p99s are of the stage's last this many
  int64_t requests = 0, errors = 0;
  std::map<std::string, int64_t> error_types;  // "503", "stream_broken", "status_differs" ... -> count
  std::deque<double> ttft_ms, tpot_ms;

  void add(int status, const std::string& error_type, const double* ttft_ms, const double* tpot_ms);
};

struct StageFigures {
  VersionFigures stable, canary;
  int64_t compared = 0, exact = 0;  // greedy pairs both answered 200, and those answered identically
  double overlap_sum = 0;
};

// The nearest-rank percentile (0..100) of `values`; NaN for none.
double percentile(const std::deque<double>& values, double p);

struct Verdict {
  enum class Action { hold, advance, rollback };
  Action action = Action::hold;
  std::vector<std::string> reasons;  // the breaches (rollback), the figures within bounds (advance), or what is awaited (hold)
};

Verdict judge(const StageFigures& figures, const CanaryThresholds& thresholds, int64_t min_samples);

}  // namespace ds
