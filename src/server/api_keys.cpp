#include "server/api_keys.h"

#include <fstream>
#include <sstream>

namespace ds {

Result<KeyFile> KeyFile::read(const std::string& path, const std::string& flag, const std::string& name_kind) {
  std::ifstream in(path);
  if (!in) return Status::error(flag + ": cannot read '" + path + "'");
  KeyFile keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::string key, name, extra;
    if (!(fields >> key)) continue;
    if (!(fields >> name) || (fields >> extra)) {
      return Status::error(flag + ": " + path + ":" + std::to_string(n) + ": expected 'KEY " + name_kind + "'");
    }
    keys.name_of_key_[key] = name;
  }
  if (keys.empty()) return Status::error(flag + ": '" + path + "' holds no key");
  return keys;
}

std::optional<std::string> KeyFile::name_of(const std::string& authorization) const {
  const std::string prefix = "Bearer ";
  if (authorization.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  auto it = name_of_key_.find(authorization.substr(prefix.size()));
  if (it == name_of_key_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ds
