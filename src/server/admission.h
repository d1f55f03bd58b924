#pragma once
// Who may send work, and how much: API keys map to tenants; each tenant and
// the server as a whole have a token bucket of requests (429 when empty) and
// a limit on requests in flight (503 when reached). The KV watermark is
// checked by the server against the engine's state, after these.
//
// Fairness rule: when the keys file names two or more tenants, each tenant's
// default limits are half of the global ones (rate, burst and requests in
// flight), so one tenant alone can never take the whole budget and every
// other tenant always finds at least half of it. Flags override either side.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/status.h"
#include "server/api_keys.h"

namespace ds {

// Refills `rate` tokens per second up to `capacity`; a request takes one.
class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  TokenBucket(double rate, double capacity, Clock::time_point now);
  // Takes a token, or returns the seconds until one is there.
  double take(Clock::time_point now);

 private:
  double rate_, capacity_, tokens_;
  Clock::time_point last_;
};

struct AdmissionLimits {
  double global_rate = 0, global_burst = 0;  // requests per second, bucket size
  double tenant_rate = 0, tenant_burst = 0;
  int64_t max_in_flight = 0, tenant_max_in_flight = 0;
};

// Why a request was not admitted; none when it was.
enum class Refusal { none, tenant_rate, global_rate, tenant_in_flight, global_in_flight };
const char* refusal_name(Refusal refusal);  // for metrics and the access log

struct AdmissionDecision {
  Refusal refusal = Refusal::none;
  double retry_after_seconds = 0;
};

class Admission {
 public:
  // keys_file: lines "KEY TENANT" ('#' starts a comment); empty: open access
  // (every request is tenant "default").
  static Result<std::unique_ptr<Admission>> create(const std::string& keys_file, const AdmissionLimits& limits);
  // The number of distinct tenants a keys file names (1 for open access).
  static Result<int> count_tenants(const std::string& keys_file);
  bool open_access() const { return keys_.empty(); }
  const KeyFile& keys() const { return keys_; }
  const AdmissionLimits& limits() const { return limits_; }

  // The tenant of an Authorization header value ("Bearer KEY"), or nullopt
  // when the key is missing or unknown.
  std::optional<std::string> tenant(const std::string& authorization) const;
  // Takes a token from the tenant's bucket, then from the global one.
  AdmissionDecision take_rate(const std::string& tenant);
  // Counts a request in flight if both limits allow; leave() ends it.
  Refusal enter(const std::string& tenant);
  // What enter() would say now, taking nothing.
  Refusal would_enter(const std::string& tenant) const;
  void leave(const std::string& tenant);
  int64_t in_flight() const;

 private:
  Admission() = default;
  KeyFile keys_;
  AdmissionLimits limits_;
  mutable std::mutex mutex_;
  std::map<std::string, TokenBucket> tenant_buckets_;
  std::optional<TokenBucket> global_;
  std::map<std::string, int64_t> tenant_in_flight_;
  int64_t in_flight_ = 0;
};

// A prefix-cache salt per tenant, so tenants never share KV pages.
uint64_t tenant_salt(const std::string& tenant);

}  // namespace ds
