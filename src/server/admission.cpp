#include "server/admission.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace ds {

TokenBucket::TokenBucket(double rate, double capacity, Clock::time_point now)
    : rate_(rate), capacity_(capacity), tokens_(capacity), last_(now) {}

double TokenBucket::take(Clock::time_point now) {
  tokens_ = std::min(capacity_, tokens_ + rate_ * std::chrono::duration<double>(now - last_).count());
  last_ = now;
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return 0.0;
  }
  return rate_ > 0 ? (1.0 - tokens_) / rate_ : 3600.0;
}

Result<std::unique_ptr<Admission>> Admission::create(const std::string& keys_file, const RateLimits& limits) {
  auto a = std::unique_ptr<Admission>(new Admission());
  a->limits_ = limits;
  a->global_.emplace(limits.global_rate, limits.global_burst, TokenBucket::Clock::now());
  if (keys_file.empty()) return a;
  std::ifstream in(keys_file);
  if (!in) return Status::error("--api-keys: cannot read '" + keys_file + "'");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::string key, tenant, extra;
    if (!(fields >> key)) continue;
    if (!(fields >> tenant) || (fields >> extra)) {
      return Status::error("--api-keys: " + keys_file + ":" + std::to_string(n) + ": expected 'KEY TENANT'");
    }
    a->tenant_of_key_[key] = tenant;
  }
  if (a->tenant_of_key_.empty()) return Status::error("--api-keys: '" + keys_file + "' holds no key");
  return a;
}

std::optional<std::string> Admission::tenant(const std::string& authorization) const {
  if (open_access()) return std::string("default");
  const std::string prefix = "Bearer ";
  if (authorization.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  auto it = tenant_of_key_.find(authorization.substr(prefix.size()));
  if (it == tenant_of_key_.end()) return std::nullopt;
  return it->second;
}

double Admission::take(const std::string& tenant) {
  const auto now = TokenBucket::Clock::now();
  std::lock_guard lock(mutex_);
  auto it = tenant_buckets_.find(tenant);
  if (it == tenant_buckets_.end()) {
    it = tenant_buckets_.emplace(tenant, TokenBucket(limits_.tenant_rate, limits_.tenant_burst, now)).first;
  }
  if (const double wait = it->second.take(now); wait > 0) return wait;
  return global_->take(now);
}

uint64_t tenant_salt(const std::string& tenant) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : tenant) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace ds
