#include "server/url_query.h"

namespace ds {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> decode(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] != '%') {
      out += text[i];
    } else {
      const int high = i + 2 < text.size() ? hex_digit(text[i + 1]) : -1;
      const int low = high >= 0 ? hex_digit(text[i + 2]) : -1;
      if (low < 0) return Status::error("malformed percent escape in the query string");
      out += char(high * 16 + low);
      i += 2;
    }
  }
  return out;
}

}  // namespace

Result<std::map<std::string, std::string>> parse_url_query(const std::string& target) {
  std::map<std::string, std::string> parameters;
  const size_t mark = target.find('?');
  if (mark == std::string::npos) return parameters;
  const std::string query = target.substr(mark + 1);
  for (size_t at = 0; at <= query.size();) {
    const size_t end = std::min(query.find('&', at), query.size());
    const std::string pair = query.substr(at, end - at);
    at = end + 1;
    if (pair.empty()) continue;
    const size_t equals = pair.find('=');
    auto name = decode(pair.substr(0, equals));
    auto value = decode(equals == std::string::npos ? "" : pair.substr(equals + 1));
    if (!name.ok()) return name.status();
    if (!value.ok()) return value.status();
    if (!parameters.emplace(name.value(), value.value()).second) {
      return Status::error("query parameter '" + name.value().substr(0, 64) + "' is given twice");
    }
  }
  return parameters;
}

}  // namespace ds
