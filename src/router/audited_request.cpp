#include "router/audited_request.h"

#include <cstdlib>

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double, std::milli>(to - from).count(); }

// "queue;dur=1.2, ttft;dur=30.5, tpot;dur=4.1" -> the dur of `name`.
std::optional<double> timing_of(const std::string& header, const std::string& name) {
  const std::string key = name + ";dur=";
  for (size_t at = header.find(key); at != std::string::npos; at = header.find(key, at + 1)) {
    if (at == 0 || header[at - 1] == ' ' || header[at - 1] == ',') return std::strtod(header.c_str() + at + key.size(), nullptr);
  }
  return std::nullopt;
}

}  // namespace

AuditAnswer measured_answer(const std::string& version, int status, const AnswerReader& reader, Clock::time_point arrived,
                            const std::string& server_timing, const std::string& error) {
  AuditAnswer a;
  const Clock::time_point now = Clock::now();
  a.version = version;
  a.status = status;
  a.latency_ms = ms_between(arrived, now);
  a.output_tokens = reader.output_tokens();
  a.output = reader.text();
  a.error = !error.empty() ? error : reader.error();
  if (reader.first_text_at()) {
    a.ttft_ms = ms_between(arrived, *reader.first_text_at());
    if (a.output_tokens > 1) a.tpot_ms = ms_between(*reader.first_text_at(), now) / double(a.output_tokens - 1);
  } else {
    a.ttft_ms = timing_of(server_timing, "ttft");
    a.tpot_ms = timing_of(server_timing, "tpot");
  }
  return a;
}

AuditedRequest::AuditedRequest(CanaryRelease& release, CanaryRelease::Route route, AuditRequestRow row)
    : release_(release), route_(std::move(route)), row_(std::move(row)), waiting_(route_.shadow ? 2 : 1) {}

void AuditedRequest::stable_answered(AuditAnswer answer) {
  std::unique_lock lock(mutex_);
  row_.stable = std::move(answer);
  complete_locked(lock);
}

void AuditedRequest::canary_unanswered(AuditAnswer answer) {
  std::lock_guard lock(mutex_);
  row_.canary = std::move(answer);
}

void AuditedRequest::canary_answered(AuditAnswer answer) {
  std::unique_lock lock(mutex_);
  row_.canary = std::move(answer);
  complete_locked(lock);
}

void AuditedRequest::complete_locked(std::unique_lock<std::mutex>& lock) {
  if (--waiting_ > 0) return;
  AuditRequestRow row = std::move(row_);
  lock.unlock();
  release_.observe(route_, std::move(row));
}

namespace {

// The shadow call's state, on its call's strand.
struct ShadowCall {
  std::atomic<int64_t>* in_flight = nullptr;  // the router's count of shadows in flight
  std::shared_ptr<AuditedRequest> audited;
  std::shared_ptr<Instance> instance;
  Clock::time_point arrived = Clock::now();
  AnswerReader reader{false};
  int status = 0;
  std::string server_timing;
  bool done = false;

  void end(const std::string& error) {
    if (done) return;
    done = true;
    --instance->outstanding;
    --*in_flight;
    audited->canary_answered(measured_answer(instance->spec().version, error.empty() ? status : (status ? 502 : 0), reader, arrived, server_timing, error));
  }
};

}  // namespace

void send_shadow(InstancePool& pool, UpstreamClient& client, std::shared_ptr<AuditedRequest> audited, const std::string& canary_version,
                 const std::string& method, const std::string& target, const HttpHeaders& headers, const std::string& body,
                 const std::vector<uint64_t>& prompt_blocks, std::atomic<int64_t>& in_flight) {
  auto call = std::make_shared<ShadowCall>();
  call->in_flight = &in_flight;
  call->audited = std::move(audited);
  call->instance = pool.pick(canary_version, {}, prompt_blocks);
  if (!call->instance) {
    --in_flight;
    call->audited->canary_answered(measured_answer(canary_version, 0, call->reader, call->arrived, "", "no healthy canary instance"));
    return;
  }
  ++call->instance->outstanding;
  UpstreamClient::Handlers handlers;
  handlers.on_head = [call](int status, const HttpHeaders& head) {
    call->status = status;
    call->server_timing = header_value(head, "server-timing");
    call->reader = AnswerReader(header_value(head, "content-type").find("text/event-stream") != std::string::npos);
  };
  handlers.on_body = [call](std::string piece) { call->reader.add(piece, Clock::now()); };
  handlers.on_end = [call] {
    call->reader.finish();
    call->end("");
  };
  handlers.on_error = [call](const std::string& error, bool) { call->end("the canary instance failed: " + error); };
  client.send(call->instance->endpoint(), method, target, headers, body, std::move(handlers), std::chrono::milliseconds(1000));
}

}  // namespace ds
