#include "grammar/string_formats.h"

#include <map>

namespace ds::grammar {
namespace {

const char* const k_date = R"([0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]))";
const char* const k_time =
    R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))";
// A label: letters, digits and inner hyphens, up to 63; up to four labels (under 253 characters in all).
const char* const k_label = R"([a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])?)";
// 0..255 without leading zeros (Python's ipaddress refuses them).
const char* const k_octet = R"(("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]))";

std::string hostname() {
  const std::string label = std::string("(") + k_label + ")";
  return label + " (\".\" " + label + "){0,3}";
}

std::string ipv4() {
  const std::string octet = k_octet;
  return octet + " \".\" " + octet + " \".\" " + octet + " \".\" " + octet;
}

// RFC 5322's dot-atom local part (atext, no quoting), then a host name.
std::string email() {
  const std::string atom = R"([a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]{1,32})";
  return atom + " (\".\" " + atom + "){0,3} \"@\" " + hostname();
}

// scheme "://" host [":" port] path ["?" query] ["#" fragment], each part's
// characters RFC 3986's unreserved, sub-delims, ":" and "@", or %HH.
std::string uri() {
  const std::string pchar = R"(([a-zA-Z0-9._~!$&'()*+,;=:@-] | "%" [0-9A-F] [0-9A-F]))";
  const std::string scheme = R"([a-zA-Z] [a-zA-Z0-9+.-]{0,15})";
  return scheme + " \"://\" " + hostname() + " (\":\" [0-9]{1,5})? (\"/\" " + pchar + "{0,32}){0,8} (\"?\" (" + pchar +
         " | [/?]){0,64})? (\"#\" (" + pchar + " | [/?]){0,32})?";
}

}  // namespace

std::optional<std::string> string_format_gbnf(const std::string& format) {
  if (format == "date") return std::string(k_date);
  if (format == "time") return std::string(k_time);
  if (format == "date-time") return std::string(k_date) + " \"T\" " + k_time;
  if (format == "uuid") return std::string(R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})");
  if (format == "hostname") return hostname();
  if (format == "ipv4") return ipv4();
  if (format == "email") return email();
  if (format == "uri") return uri();
  return std::nullopt;
}

const char* supported_string_formats() { return "date, time, date-time, uuid, hostname, ipv4, email, uri"; }

}  // namespace ds::grammar
