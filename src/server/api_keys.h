#pragma once
// A keys file: lines "KEY NAME" ('#' starts a comment), the name being a
// tenant (--api-keys) or an operator (--admin-keys); and the lookup of an
// Authorization header's bearer key in it.

#include <map>
#include <optional>
#include <string>

#include "base/status.h"

namespace ds {

class KeyFile {
 public:
  // `flag` names the option in errors ("--api-keys"); `name_kind` the second field ("TENANT").
  static Result<KeyFile> read(const std::string& path, const std::string& flag, const std::string& name_kind);

  // The name of an Authorization header value's key ("Bearer KEY"), or nullopt.
  std::optional<std::string> name_of(const std::string& authorization) const;
  const std::map<std::string, std::string>& names() const { return name_of_key_; }  // key -> name
  bool empty() const { return name_of_key_.empty(); }

 private:
  std::map<std::string, std::string> name_of_key_;
};

}  // namespace ds
