#pragma once
// Reads an architecture's hyper-parameters from GGUF metadata, every value
// type-checked and bounded so that later products cannot overflow; errors
// name the key.

#include <cstdint>
#include <string>

#include "base/status.h"
#include "gguf/gguf_file.h"

namespace ds {

class ConfigReader {
 public:
  // Keys are read under `prefix` ("llama.", "deepseek2.").
  ConfigReader(const GgufFile& file, std::string prefix) : file_(file), prefix_(std::move(prefix)) {}

  static constexpr int64_t k_max_dim = int64_t(1) << 20;

  const GgufFile& file() const { return file_; }
  const std::string& prefix() const { return prefix_; }
  bool has(const std::string& key) const { return file_.find(prefix_ + key) != nullptr; }

  // A required dimension in [1, k_max_dim].
  Status dim(const std::string& key, int64_t* out) const;
  // The same where present; *out keeps its value where absent.
  Status optional_dim(const std::string& key, int64_t* out) const;
  // An unsigned integer in [0, high], `fallback` where absent.
  Status uint_in(const std::string& key, uint64_t fallback, uint64_t high, int64_t* out) const;
  // A float, `fallback` where absent; present: finite and within [low, high].
  Result<double> bounded_float(const std::string& key, double fallback, double low, double high) const;
  // A boolean where present; *out keeps its value where absent.
  Status optional_bool(const std::string& key, bool* out) const;

  Status out_of_range(const std::string& key, uint64_t value) const;

 private:
  const GgufFile& file_;
  std::string prefix_;
};

}  // namespace ds
