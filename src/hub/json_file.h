#pragma once
// A checkpoint's JSON files (config.json, the shard index, the tokenizer's):
// one JSON object each, or an error naming the file.

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace ds {

Result<nlohmann::json> read_json_object(const std::string& path);

}  // namespace ds
