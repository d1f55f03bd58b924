#pragma once
// A small command-line parser: `--name value`, `-n value`, `--flag`, and
// positional words, with errors that name the offending option.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace ds {

class Args {
 public:
  // value_options take a value (listed with every alias); flags take none.
  static Result<Args> parse(int argc, char** argv, const std::set<std::string>& value_options,
                            const std::set<std::string>& flags);

  bool has(const std::string& name) const { return values_.count(name) > 0 || flags_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  Result<int64_t> get_int(const std::string& name, int64_t fallback) const;
  Result<double> get_float(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

  // For options given other than on the command line (a swap's fields over serve's flags).
  void set(const std::string& name, const std::string& value) { values_[name] = value; }
  void set_flag(const std::string& name) { flags_.insert(name); }
  void erase(const std::string& name) {
    values_.erase(name);
    flags_.erase(name);
  }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

}  // namespace ds
