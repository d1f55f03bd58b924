#include "router/canary_release.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "router/answer_text.h"

namespace ds {
namespace {

using json = nlohmann::json;

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Why an answer counts as an error ("" when it does not); `reference` is the
// other version's answer to the same input, when there is one: a canary that
// answers a status stable did not is in error, whatever the status.
std::string error_type(const AuditAnswer& a, const AuditAnswer* reference) {
  if (a.status == 0) return "no_answer";
  if (a.status >= 500) return "http_" + std::to_string(a.status);
  if (a.status == 200 && !a.error.empty()) return "stream_error";  // an error event inside a stream begun with 200
  // 499: the client left, which says nothing of either version.
  if (reference && reference->status != 0 && reference->status != 499 && a.status != 499 && a.status != reference->status) return "status_differs";
  return "";
}

json number_or_null(double v) { return std::isfinite(v) ? json(std::round(v * 10) / 10) : json(nullptr); }

json version_json(const VersionFigures& v) {
  json types = json::object();
  for (const auto& [type, n] : v.error_types) types[type] = n;
  return {{"requests", v.requests},
          {"errors", v.errors},
          {"error_rate", v.requests ? json(double(v.errors) / double(v.requests)) : json(nullptr)},
          {"error_types", types},
          {"ttft_p50_ms", number_or_null(percentile(v.ttft_ms, 50))},
          {"ttft_p99_ms", number_or_null(percentile(v.ttft_ms, 99))},
          {"tpot_p50_ms", number_or_null(percentile(v.tpot_ms, 50))},
          {"tpot_p99_ms", number_or_null(percentile(v.tpot_ms, 99))},
          {"latency_samples", v.ttft_ms.size()}};
}

json figures_json(const StageFigures& f) {
  return {{"stable", version_json(f.stable)},
          {"canary", version_json(f.canary)},
          {"greedy_pairs", f.compared},
          {"exact_match", f.compared ? json(double(f.exact) / double(f.compared)) : json(nullptr)},
          {"token_overlap", f.compared ? json(f.overlap_sum / double(f.compared)) : json(nullptr)}};
}

json decision_json(const AuditDecisionRow& d) {
  return {{"unix_ms", d.unix_ms},       {"action", d.action}, {"state", d.state},
          {"from_percent", d.from_percent}, {"to_percent", d.to_percent}, {"by", d.by},
          {"reasons", json::parse(d.reasons_json, nullptr, false)}, {"figures", json::parse(d.figures_json, nullptr, false)}};
}

const char* verdict_name(Verdict::Action a) {
  switch (a) {
    case Verdict::Action::hold: return "hold";
    case Verdict::Action::advance: return "advance";
    case Verdict::Action::rollback: return "rollback";
  }
  return "?";
}

}  // namespace

const char* canary_state_name(CanaryRelease::State state) {
  switch (state) {
    case CanaryRelease::State::running: return "running";
    case CanaryRelease::State::promoted: return "promoted";
    case CanaryRelease::State::rolled_back: return "rolled_back";
  }
  return "?";
}

Result<std::unique_ptr<CanaryRelease>> CanaryRelease::open(const CanaryConfig& canary, const AuditConfig& audit) {
  auto log = AuditLog::open(audit.path);
  if (!log.ok()) return log.status();
  auto past = log.value()->decisions(canary.stable, canary.canary, 100);
  if (!past.ok()) return past.status();
  std::unique_ptr<CanaryRelease> release(new CanaryRelease(canary, audit, log.take()));
  std::lock_guard lock(release->mutex_);
  release->decisions_ = past.take();
  if (release->decisions_.empty()) {
    release->decide_locked("start", State::running, 0, "config", {"a release of '" + canary.canary + "' beside '" + canary.stable + "' begins"});
    return release;
  }
  // Resumed where the last decision left it: the largest stage not above its percentage.
  const AuditDecisionRow& last = release->decisions_.back();
  release->state_ = last.state == "promoted" ? State::promoted : last.state == "rolled_back" ? State::rolled_back : State::running;
  release->stage_ = 0;
  for (size_t i = 0; i < canary.stages.size(); ++i) {
    if (canary.stages[i] <= last.to_percent) release->stage_ = int(i);
  }
  DS_LOG_INFO("canary: release of '%s' beside '%s' resumed from its audit: %s at %d%%", canary.canary.c_str(), canary.stable.c_str(),
              canary_state_name(release->state_), release->stage_percent_locked());
  return release;
}

CanaryRelease::CanaryRelease(CanaryConfig canary, AuditConfig audit, std::unique_ptr<AuditLog> log)
    : config_(std::move(canary)), audit_config_(std::move(audit)), log_(std::move(log)) {
  for (const std::string& cidr : config_.client_cidrs) ranges_.push_back(AddressRange::parse(cidr).value());  // checked by the config
}

int CanaryRelease::stage_percent_locked() const {
  if (state_ == State::promoted) return 100;
  if (state_ == State::rolled_back) return 0;
  return config_.stages[size_t(stage_)];
}

bool CanaryRelease::keeps_input_of(const std::string& tenant) const {
  return audit_config_.all_inputs ||
         std::find(audit_config_.input_tenants.begin(), audit_config_.input_tenants.end(), tenant) != audit_config_.input_tenants.end();
}

Result<CanaryRelease::Route> CanaryRelease::route(const std::string& dye, const std::string& tenant, const std::string& client_address,
                                                  bool generation) {
  if (!dye.empty() && dye != "0" && dye != "1") {
    return Status::error("header " + config_.header + " must be \"1\" (the canary) or \"0\" (the stable version)");
  }
  std::lock_guard lock(mutex_);
  Route r;
  if (state_ != State::running || !generation) {
    const bool canary = state_ == State::promoted || (state_ == State::running && dye == "1");
    r.version = canary ? config_.canary : config_.stable;
    return r;
  }
  r.stage = stage_;
  bool canary = false;
  if (!dye.empty()) {
    canary = dye == "1";
  } else if (std::find(config_.tenants.begin(), config_.tenants.end(), tenant) != config_.tenants.end()) {
    canary = true;
  } else if (std::any_of(ranges_.begin(), ranges_.end(), [&](const AddressRange& range) { return range.contains(client_address); })) {
    canary = true;
  } else {
    canary = std::uniform_real_distribution<double>(0, 100)(random_) < double(config_.stages[size_t(stage_)]);
  }
  r.canary = canary;
  r.version = canary ? config_.canary : config_.stable;
  r.shadow = !canary && std::uniform_real_distribution<double>(0, 1)(random_) < config_.shadow_fraction;
  return r;
}

void CanaryRelease::observe_stable(const Route& route, const AuditAnswer& answer) {
  std::lock_guard lock(mutex_);
  if (state_ != State::running || route.stage != stage_) return;
  const std::string error = error_type(answer, nullptr);
  figures_.stable.add(answer.status, error, answer.ttft_ms ? &*answer.ttft_ms : nullptr, answer.tpot_ms ? &*answer.tpot_ms : nullptr);
}

void CanaryRelease::observe(const Route& route, AuditRequestRow row) {
  row.unix_ms = unix_ms_now();
  row.stage_percent = config_.stages[size_t(std::max(0, route.stage))];
  row.kind = route.canary ? "canary" : "shadow";
  if (row.stable && row.canary && row.greedy && row.stable->status == 200 && row.canary->status == 200) {
    row.exact_match = row.stable->output == row.canary->output;
    row.token_overlap = token_overlap(row.stable->output, row.canary->output);
  }
  std::lock_guard lock(mutex_);
  ++(route.canary ? audited_canary_ : audited_shadow_);
  const bool counts = state_ == State::running && route.stage == stage_;
  if (counts) {
    const auto add = [](VersionFigures& v, const AuditAnswer& a, const AuditAnswer* reference) {
      v.add(a.status, error_type(a, reference), a.ttft_ms ? &*a.ttft_ms : nullptr, a.tpot_ms ? &*a.tpot_ms : nullptr);
    };
    if (row.canary) add(figures_.canary, *row.canary, row.stable ? &*row.stable : nullptr);
    if (row.stable && !route.canary) add(figures_.stable, *row.stable, nullptr);
    if (row.exact_match) {
      ++figures_.compared;
      figures_.exact += *row.exact_match ? 1 : 0;
      figures_.overlap_sum += *row.token_overlap;
    }
  }
  log_->record(std::move(row));
  if (!counts) return;
  Verdict verdict = judge(figures_, config_.thresholds, config_.min_samples);
  last_verdict_ = verdict_name(verdict.action);
  last_reasons_ = verdict.reasons;
  if (verdict.action == Verdict::Action::rollback) {
    decide_locked("rollback", State::rolled_back, stage_, "policy", std::move(verdict.reasons));
  } else if (verdict.action == Verdict::Action::advance) {
    const bool last = config_.stages[size_t(stage_) + 1] == 100;
    decide_locked(last ? "promote" : "advance", last ? State::promoted : State::running, stage_ + 1, "policy", std::move(verdict.reasons));
  }
}

Status CanaryRelease::promote(const std::string& by) {
  std::lock_guard lock(mutex_);
  if (state_ != State::running) return Status::error(std::string("the release has ended: ") + canary_state_name(state_));
  decide_locked("promote", State::promoted, int(config_.stages.size()) - 1, by, {"promoted by an operator"});
  return Status();
}

Status CanaryRelease::rollback(const std::string& by) {
  std::lock_guard lock(mutex_);
  if (state_ != State::running) return Status::error(std::string("the release has ended: ") + canary_state_name(state_));
  decide_locked("rollback", State::rolled_back, stage_, by, {"rolled back by an operator"});
  return Status();
}

void CanaryRelease::decide_locked(const std::string& action, State to, int to_stage, const std::string& by, std::vector<std::string> reasons) {
  AuditDecisionRow d;
  d.unix_ms = unix_ms_now();
  d.stable_version = config_.stable;
  d.canary_version = config_.canary;
  d.from_percent = action == "start" ? 0 : stage_percent_locked();
  d.action = action;
  d.state = canary_state_name(to);
  d.by = by;
  d.reasons_json = json(reasons).dump();
  d.figures_json = figures_json(figures_).dump();
  state_ = to;
  stage_ = to_stage;
  d.to_percent = stage_percent_locked();
  DS_LOG_INFO("canary: %s by %s: %d%% -> %d%% (%s): %s", action.c_str(), by.c_str(), d.from_percent, d.to_percent, d.state.c_str(),
              d.reasons_json.c_str());
  figures_ = StageFigures();
  last_verdict_ = "hold";
  last_reasons_.clear();
  decisions_.push_back(d);
  if (decisions_.size() > 100) decisions_.erase(decisions_.begin());
  log_->record(std::move(d));
}

std::string CanaryRelease::status_json() const {
  std::lock_guard lock(mutex_);
  json decisions = json::array();
  for (const AuditDecisionRow& d : decisions_) decisions.push_back(decision_json(d));
  const CanaryThresholds& t = config_.thresholds;
  const auto optional = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json out = {{"stable", config_.stable},
              {"canary", config_.canary},
              {"state", canary_state_name(state_)},
              {"stage_percent", stage_percent_locked()},
              {"stages", config_.stages},
              {"min_samples", config_.min_samples},
              {"shadow_fraction", config_.shadow_fraction},
              {"thresholds", {{"max_error_rate_increase", optional(t.max_error_rate_increase)}, {"max_ttft_p99_increase", optional(t.max_ttft_p99_increase)},
                              {"max_tpot_p99_increase", optional(t.max_tpot_p99_increase)}, {"latency_slack_ms", t.latency_slack_ms},
                              {"min_exact_match", optional(t.min_exact_match)}, {"min_token_overlap", optional(t.min_token_overlap)}}},
              {"stage", {{"figures", figures_json(figures_)}, {"verdict", last_verdict_}, {"reasons", last_reasons_}}},
              {"audit", {{"path", audit_config_.path}, {"canary_requests", audited_canary_}, {"shadow_requests", audited_shadow_},
                         {"rows_written", log_->rows_written()}, {"rows_dropped", log_->rows_dropped()}}},
              {"decisions", decisions}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string CanaryRelease::metrics_text() const {
  std::unique_lock lock(mutex_);
  const std::string state = canary_state_name(state_);
  const int stage_percent = stage_percent_locked();
  const int64_t audited[] = {audited_canary_, audited_shadow_};
  lock.unlock();
  std::string text;
  const auto gauge = [&](const std::string& name, const char* type, const char* help, const std::string& labels, const std::string& value) {
    text += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + labels + " " + value + "\n";
  };
  const std::string release = "{stable=\"" + config_.stable + "\",canary=\"" + config_.canary + "\"}";
  gauge("dsinfer_router:canary_stage_percent", "gauge", "The share of undyed traffic the canary takes (100 once promoted, 0 once rolled back).", release,
        std::to_string(stage_percent));
  text += "# HELP dsinfer_router:canary_state 1 for the release's state.\n# TYPE dsinfer_router:canary_state gauge\n";
  for (const char* name : {"running", "promoted", "rolled_back"}) {
    text += "dsinfer_router:canary_state{state=\"" + std::string(name) + "\"} " + (state == name ? "1" : "0") + "\n";
  }
  text += "# HELP dsinfer_router:canary_audited_requests_total Requests audited, by kind.\n"
          "# TYPE dsinfer_router:canary_audited_requests_total counter\n";
  for (int i = 0; i < 2; ++i) {
    text += std::string("dsinfer_router:canary_audited_requests_total{kind=\"") + (i == 0 ? "canary" : "shadow") + "\"} " +
            std::to_string(audited[i]) + "\n";
  }
  gauge("dsinfer_router:audit_rows_written_total", "counter", "Rows written to the audit file.", "", std::to_string(log_->rows_written()));
  gauge("dsinfer_router:audit_rows_dropped_total", "counter", "Audit rows lost (queue full or a write failed).", "", std::to_string(log_->rows_dropped()));
  return text;
}

}  // namespace ds
