#pragma once
// A canary release between two versions of the instances: which requests go
// to the canary, the shadow copies of stable traffic, the figures each stage
// gathers, the decisions (canary_policy.h) and their audit (audit_log.h).
//
// A request goes to the canary while the release runs when it is dyed — the
// header (config `select.header`, "1"; "0" keeps it on stable), its tenant,
// or its client's address range — or else by the stage's percentage, drawn
// at random per request. A shadow_fraction of the requests stable serves is
// also sent to the canary, whose answer is audited and compared, never
// returned. After a rollback every request goes to stable, after promotion to
// the canary, and neither is audited. The state survives a restart: it is
// read back from the audit's decisions.
//
//   running (stage 1% -> 10% -> 50% -> ...) ──(every figure within bounds at the last stage below 100)──► promoted
//       └──(a figure breaches its threshold, or an operator)──► rolled_back

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "router/address_range.h"
#include "router/audit_log.h"
#include "router/canary_policy.h"
#include "router/router_config.h"

namespace ds {

class CanaryRelease {
 public:
  enum class State { running, promoted, rolled_back };

  // Opens the audit and resumes the release where its last decision left it.
  static Result<std::unique_ptr<CanaryRelease>> open(const CanaryConfig& canary, const AuditConfig& audit);

  struct Route {
    std::string version;  // the version that answers the client
    bool canary = false;  // a canary request (audited)
    bool shadow = false;  // a stable request copied to the canary
    int stage = -1;       // the stage it was routed in (-1: not part of the release)
  };
  // Where a request goes. `dye` is the value of the select header ("" when absent);
  // an error names a value other than "0" or "1". Only generation requests
  // (`generation`: completions, chat) take part in the release; any other
  // (models, tokenize, embeddings) goes to the version serving the release's
  // state, or to the canary when dyed with "1" while it runs, unaudited.
  Result<Route> route(const std::string& dye, const std::string& tenant, const std::string& client_address, bool generation = true);
  const std::string& header() const { return config_.header; }
  const std::string& stable_version() const { return config_.stable; }
  const std::string& canary_version() const { return config_.canary; }
  bool keeps_input_of(const std::string& tenant) const;

  // One audited request, when every answer it waits for is in: `canary` for
  // a canary request (with `stable` too when no canary instance could take it
  // and stable answered instead), both for a shadow pair. Counts it in the
  // stage it was routed in (if that stage still runs), writes its audit row,
  // and lets the policy decide.
  void observe(const Route& route, AuditRequestRow row);
  // A stable request not shadowed: its figures only.
  void observe_stable(const Route& route, const AuditAnswer& answer);

  // An operator's decision; an error when the release has already ended.
  Status promote(const std::string& by);
  Status rollback(const std::string& by);

  // {stable, canary, state, stage_percent, stages, ..., stage: {figures, verdict}, decisions: [...]}
  std::string status_json() const;
  std::string metrics_text() const;

 private:
  CanaryRelease(CanaryConfig canary, AuditConfig audit, std::unique_ptr<AuditLog> log);
  void decide_locked(const std::string& action, State to, int to_stage, const std::string& by, std::vector<std::string> reasons);
  int stage_percent_locked() const;

  const CanaryConfig config_;
  const AuditConfig audit_config_;
  std::vector<AddressRange> ranges_;
  std::unique_ptr<AuditLog> log_;
  mutable std::mutex mutex_;  // guards the fields below
  State state_ = State::running;
  int stage_ = 0;  // index into config_.stages
  StageFigures figures_;  // of the current stage
  std::string last_verdict_ = "hold";
  std::vector<std::string> last_reasons_;
  int64_t audited_canary_ = 0, audited_shadow_ = 0;
  std::vector<AuditDecisionRow> decisions_;  // the last 100, oldest first
  std::mt19937_64 random_{std::random_device{}()};
};

const char* canary_state_name(CanaryRelease::State state);

}  // namespace ds
