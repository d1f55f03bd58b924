#pragma once
// One request of a canary release on its way to the audit: the answers it
// waits for (the one the client gets and, for a shadow, the canary's copy),
// each measured as it passed through (answer_text.h), and the hand-over to
// the release (canary_release.h) when the last of them is in. The shadow
// copy itself is sent here: to a canary instance, read, never returned.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "router/answer_text.h"
#include "router/canary_release.h"
#include "router/instance_pool.h"
#include "router/upstream_client.h"

namespace ds {

// What an answer came to: the status the client saw (or would have), times
// from `arrived` (streams: the first generated text; whole answers: the
// instance's Server-Timing), the reader's text and tokens.
AuditAnswer measured_answer(const std::string& version, int status, const AnswerReader& reader, std::chrono::steady_clock::time_point arrived,
                            const std::string& server_timing, const std::string& error);

class AuditedRequest {
 public:
  AuditedRequest(CanaryRelease& release, CanaryRelease::Route route, AuditRequestRow row);
  const CanaryRelease::Route& route() const { return route_; }
  // One side's answer; the row goes to the release when both sides it waits for are in.
  void stable_answered(AuditAnswer answer);
  void canary_answered(AuditAnswer answer);
  // A canary request no canary instance could take: stable answers it instead (stable_answered ends it).
  void canary_unanswered(AuditAnswer answer);

 private:
  void complete_locked(std::unique_lock<std::mutex>& lock);
  CanaryRelease& release_;
  const CanaryRelease::Route route_;
  std::mutex mutex_;  // guards the fields below
  AuditRequestRow row_;
  int waiting_;
};

// Sends the shadow copy of a stable request to a healthy canary instance and
// hands its answer to `audited` (status 0 when none could take it); `in_flight`,
// counted up by the caller, is counted down when the copy has its answer.
void send_shadow(InstancePool& pool, UpstreamClient& client, std::shared_ptr<AuditedRequest> audited, const std::string& canary_version,
                 const std::string& method, const std::string& target, const HttpHeaders& headers, const std::string& body,
                 const std::vector<uint64_t>& prompt_blocks, std::atomic<int64_t>& in_flight);

}  // namespace ds
