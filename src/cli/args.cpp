#include "cli/args.h"

#include <cstdlib>

namespace ds {

Result<Args> Args::parse(int argc, char** argv, const std::set<std::string>& value_options,
                         const std::set<std::string>& flags) {
  Args args;
  for (int i = 0; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.size() > 1 && word[0] == '-' && !(word.size() > 1 && std::isdigit(static_cast<unsigned char>(word[1])))) {
      if (flags.count(word)) {
        args.flags_.insert(word);
      } else if (value_options.count(word)) {
        if (i + 1 >= argc) return Status::error("option " + word + " needs a value");
        args.values_[word] = argv[++i];
      } else {
        return Status::error("unknown option " + word);
      }
    } else {
      args.positional_.push_back(word);
    }
  }
  return args;
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

Result<int64_t> Args::get_int(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (end == it->second.c_str() || *end != '\0') return Status::error("option " + name + " expects an integer, got '" + it->second + "'");
  return int64_t(v);
}

Result<double> Args::get_float(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0') return Status::error("option " + name + " expects a number, got '" + it->second + "'");
  return v;
}

}  // namespace ds
