#pragma once
// Reading a request body that another API's shape is made from (Anthropic's
// Messages, OpenAI's Responses): the first problem found throws, naming the
// field, and the parser turns it into the 400 it answers.

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "server/api_error.h"

namespace ds {

// Ordered, so that a tool's schema reaches the template in the client's key order.
using OrderedJson = nlohmann::ordered_json;

struct RequestFieldError {
  ApiError error;
};

[[noreturn]] inline void refuse_field(const std::string& field, const std::string& message) {
  throw RequestFieldError{ApiError::invalid(field, message)};
}

// Every key of `object` is one of `allowed`, else a refusal of `field` naming where.
inline void only_fields(const OrderedJson& object, const std::set<std::string>& allowed, const std::string& where, const std::string& field) {
  for (const auto& [key, value] : object.items()) {
    if (!allowed.count(key)) refuse_field(field, "unknown field '" + where + "." + key + "'");
  }
}

// The member, or nullptr when absent or null (null asks for the default).
inline const OrderedJson* member(const OrderedJson& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// fn(item, "field[i]") for each item of `array`, refused unless it is an array.
template <typename F>
void each_item(const OrderedJson& array, const std::string& field, F fn) {
  if (!array.is_array()) refuse_field(field, "'" + field + "' must be an array");
  for (size_t i = 0; i < array.size(); ++i) fn(array[i], field + "[" + std::to_string(i) + "]");
}

}  // namespace ds
