#include "router/canary_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ds {
namespace {

std::string format(const char* f, double a, double b, double c) {
  char text[200];
  std::snprintf(text, sizeof text, f, a, b, c);
  return text;
}

}  // namespace

void VersionFigures::add(int status, const std::string& error_type, const double* ttft, const double* tpot) {
  ++requests;
  if (!error_type.empty()) {
    ++errors;
    ++error_types[error_type];
  }
  if (!error_type.empty() || status != 200) return;
  const auto keep = [](std::deque<double>& values, double v) {
    values.push_back(v);
    if (values.size() > k_max_latencies) values.pop_front();
  };
  if (ttft) keep(ttft_ms, *ttft);
  if (tpot) keep(tpot_ms, *tpot);
}

double percentile(const std::deque<double>& values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t rank = size_t(std::ceil(p / 100.0 * double(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Verdict judge(const StageFigures& f, const CanaryThresholds& t, int64_t min_samples) {
  std::vector<std::string> breaches, passes, waits;
  const auto wait = [&](const char* figure, int64_t have_stable, int64_t have_canary) {
    char text[200];
    std::snprintf(text, sizeof text, "%s: %lld of %lld samples (stable %lld, canary %lld)", figure,
                  static_cast<long long>(std::min(have_stable, have_canary)), static_cast<long long>(min_samples),
                  static_cast<long long>(have_stable), static_cast<long long>(have_canary));
    waits.push_back(text);
  };
  // Whatever the thresholds, a stage lasts until the canary answered min_samples requests.
  if (f.stable.requests < min_samples || f.canary.requests < min_samples) {
    wait(t.max_error_rate_increase ? "error rate" : "requests", f.stable.requests, f.canary.requests);
  } else if (t.max_error_rate_increase) {
    {
      const double stable = double(f.stable.errors) / double(f.stable.requests);
      const double canary = double(f.canary.errors) / double(f.canary.requests);
      const std::string text = format("error rate %.2f%% against stable's %.2f%% (allowed: +%.2f points)", 100 * canary, 100 * stable,
                                      100 * *t.max_error_rate_increase);
      (canary - stable > *t.max_error_rate_increase ? breaches : passes).push_back(text);
    }
  }
  const auto latency = [&](const char* name, const std::deque<double>& stable, const std::deque<double>& canary,
                           const std::optional<double>& max_increase) {
    if (!max_increase) return;
    if (int64_t(stable.size()) < min_samples || int64_t(canary.size()) < min_samples) {
      return wait(name, int64_t(stable.size()), int64_t(canary.size()));
    }
    const double s = percentile(stable, 99), c = percentile(canary, 99);
    const bool over = c > s * (1 + *max_increase) && c > s + t.latency_slack_ms;
    (over ? breaches : passes).push_back(std::string(name) + format(" %.1f ms against stable's %.1f ms (allowed: +%.0f%%", c, s, 100 * *max_increase) +
                                         format(" or +%.0f ms)", t.latency_slack_ms, 0, 0));
  };
  latency("TTFT p99", f.stable.ttft_ms, f.canary.ttft_ms, t.max_ttft_p99_increase);
  latency("TPOT p99", f.stable.tpot_ms, f.canary.tpot_ms, t.max_tpot_p99_increase);
  if (t.min_exact_match || t.min_token_overlap) {
    if (f.compared < min_samples) {
      wait("greedy answer pairs", f.compared, f.compared);
    } else {
      const double exact = double(f.exact) / double(f.compared), overlap = f.overlap_sum / double(f.compared);
      if (t.min_exact_match) {
        (exact < *t.min_exact_match ? breaches : passes)
            .push_back(format("exact match %.1f%% of %.0f greedy pairs (required: %.1f%%)", 100 * exact, double(f.compared), 100 * *t.min_exact_match));
      }
      if (t.min_token_overlap) {
        (overlap < *t.min_token_overlap ? breaches : passes)
            .push_back(format("token overlap %.3f over %.0f greedy pairs (required: %.3f)", overlap, double(f.compared), *t.min_token_overlap));
      }
    }
  }
  Verdict v;
  if (!breaches.empty()) {
    v.action = Verdict::Action::rollback;
    v.reasons = std::move(breaches);
  } else if (waits.empty()) {
    v.action = Verdict::Action::advance;
    v.reasons = std::move(passes);
  } else {
    v.reasons = std::move(waits);
  }
  return v;
}

}  // namespace ds
