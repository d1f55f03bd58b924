#include "server/admission.h"

#include <algorithm>
#include <set>

namespace ds {
const char* refusal_name(Refusal refusal) {
  switch (refusal) {
    case Refusal::none: return "none";
    case Refusal::tenant_rate: return "tenant_rate_limit";
    case Refusal::global_rate: return "global_rate_limit";
    case Refusal::tenant_in_flight: return "tenant_in_flight";
    case Refusal::global_in_flight: return "queue_full";
  }
  return "?";
}

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

Result<std::unique_ptr<Admission>> Admission::create(const std::string& keys_file, const AdmissionLimits& limits) {
  auto a = std::unique_ptr<Admission>(new Admission());
  a->limits_ = limits;
  a->global_.emplace(limits.global_rate, limits.global_burst, TokenBucket::Clock::now());
  if (keys_file.empty()) return a;
  auto keys = KeyFile::read(keys_file, "--api-keys", "TENANT");
  if (!keys.ok()) return keys.status();
  a->keys_ = keys.take();
  return a;
}

Result<int> Admission::count_tenants(const std::string& keys_file) {
  if (keys_file.empty()) return 1;
  auto keys = KeyFile::read(keys_file, "--api-keys", "TENANT");
  if (!keys.ok()) return keys.status();
  std::set<std::string> tenants;
  for (const auto& [key, tenant] : keys.value().names()) tenants.insert(tenant);
  return int(tenants.size());
}

std::optional<std::string> Admission::tenant(const std::string& authorization) const {
  if (open_access()) return std::string("default");
  return keys_.name_of(authorization);
}

AdmissionDecision Admission::take_rate(const std::string& tenant) {
  const auto now = TokenBucket::Clock::now();
  std::lock_guard lock(mutex_);
  auto it = tenant_buckets_.find(tenant);
  if (it == tenant_buckets_.end()) {
    it = tenant_buckets_.emplace(tenant, TokenBucket(limits_.tenant_rate, limits_.tenant_burst, now)).first;
  }
  // The tenant's own bucket first: a tenant over its limit takes nothing from the others.
  if (const double wait = it->second.take(now); wait > 0) return {Refusal::tenant_rate, wait};
  if (const double wait = global_->take(now); wait > 0) return {Refusal::global_rate, wait};
  return {};
}

Refusal Admission::would_enter(const std::string& tenant) const {
  std::lock_guard lock(mutex_);
  auto it = tenant_in_flight_.find(tenant);
  if (it != tenant_in_flight_.end() && it->second >= limits_.tenant_max_in_flight) return Refusal::tenant_in_flight;
  if (in_flight_ >= limits_.max_in_flight) return Refusal::global_in_flight;
  return Refusal::none;
}

Refusal Admission::enter(const std::string& tenant) {
  std::lock_guard lock(mutex_);
  int64_t& mine = tenant_in_flight_[tenant];
  if (mine >= limits_.tenant_max_in_flight) return Refusal::tenant_in_flight;
  if (in_flight_ >= limits_.max_in_flight) return Refusal::global_in_flight;
  ++mine;
  ++in_flight_;
  return Refusal::none;
}

void Admission::leave(const std::string& tenant) {
  std::lock_guard lock(mutex_);
  auto it = tenant_in_flight_.find(tenant);
  if (it == tenant_in_flight_.end() || it->second == 0) return;
  --it->second;
  --in_flight_;
}

int64_t Admission::in_flight() const {
  std::lock_guard lock(mutex_);
  return in_flight_;
}

uint64_t tenant_salt(const std::string& tenant) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : tenant) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace ds
