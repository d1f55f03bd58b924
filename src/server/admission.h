#pragma once
// Who may send work, and how much: API keys map to tenants; each tenant and
// the server as a whole have a token bucket of requests (429 when empty).
// The queue limit and KV watermark (503) are checked by the server against
// the engine's state, after these.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <string>

#include "base/status.h"

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

struct RateLimits {
  double global_rate = 0, global_burst = 0;  // requests per second, bucket size
  double tenant_rate = 0, tenant_burst = 0;
};

class Admission {
 public:
  // keys_file: lines "KEY TENANT" ('#' starts a comment); empty: open access
  // (every request is tenant "default").
  static Result<std::unique_ptr<Admission>> create(const std::string& keys_file, const RateLimits& limits);
  bool open_access() const { return tenant_of_key_.empty(); }
  const RateLimits& limits() const { return limits_; }

  // The tenant of an Authorization header value ("Bearer KEY"), or nullopt
  // when the key is missing or unknown.
  std::optional<std::string> tenant(const std::string& authorization) const;
  // 0 when the request may go on; else seconds until it may retry.
  double take(const std::string& tenant);

 private:
  Admission() = default;
  std::map<std::string, std::string> tenant_of_key_;
  RateLimits limits_;
  std::mutex mutex_;
  std::map<std::string, TokenBucket> tenant_buckets_;
  std::optional<TokenBucket> global_;
};

// A prefix-cache salt per tenant, so tenants never share KV pages.
uint64_t tenant_salt(const std::string& tenant);

}  // namespace ds
