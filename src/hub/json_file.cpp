#include "hub/json_file.h"

#include "base/file_text.h"

namespace ds {

Result<nlohmann::json> read_json_object(const std::string& path) {
  const std::optional<std::string> text = read_file_text(path);
  if (!text) return Status::error("cannot read " + path);
  nlohmann::json value = nlohmann::json::parse(*text, nullptr, false);
  if (value.is_discarded() || !value.is_object()) return Status::error(path + " is not a JSON object");
  return value;
}

}  // namespace ds
