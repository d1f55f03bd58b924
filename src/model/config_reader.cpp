#include "model/config_reader.h"

#include <cmath>
#include <cstdio>

namespace ds {

Status ConfigReader::out_of_range(const std::string& key, uint64_t value) const {
  return Status::error("model: metadata '" + prefix_ + key + "' = " + std::to_string(value) + " is out of range");
}

Status ConfigReader::dim(const std::string& key, int64_t* out) const {
  auto v = file_.get_uint(prefix_ + key);
  if (!v.ok()) return v.status();
  if (v.value() == 0 || v.value() > uint64_t(k_max_dim)) return out_of_range(key, v.value());
  *out = int64_t(v.value());
  return Status();
}

Status ConfigReader::optional_dim(const std::string& key, int64_t* out) const {
  return has(key) ? dim(key, out) : Status();
}

Status ConfigReader::uint_in(const std::string& key, uint64_t fallback, uint64_t high, int64_t* out) const {
  auto v = file_.get_uint_or(prefix_ + key, fallback);
  if (!v.ok()) return v.status();
  if (v.value() > high) return out_of_range(key, v.value());
  *out = int64_t(v.value());
  return Status();
}

Result<double> ConfigReader::bounded_float(const std::string& key, double fallback, double low, double high) const {
  auto v = file_.get_float_or(prefix_ + key, fallback);
  if (!v.ok()) return v.status();
  if (!std::isfinite(v.value()) || v.value() < low || v.value() > high) {
    char range[96];
    std::snprintf(range, sizeof range, "[%g, %g]", low, high);
    return Status::error("model: metadata '" + prefix_ + key + "' = " + std::to_string(v.value()) +
                         " is not a finite number in " + range);
  }
  return v.value();
}

Status ConfigReader::optional_bool(const std::string& key, bool* out) const {
  if (!has(key)) return Status();
  auto v = file_.get_bool(prefix_ + key);
  if (!v.ok()) return v.status();
  *out = v.value();
  return Status();
}

}  // namespace ds
