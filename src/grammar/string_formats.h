#pragma once
// JSON Schema's string formats as GBNF over a JSON string's contents: what
// each admits is valid by the checkers jsonschema uses (RFC 3339 for date,
// time and date-time; RFC 4122 for uuid; RFC 1123 host names as the fqdn
// package checks them; dotted-quad IPv4 without leading zeros; a dot-atom
// address for email; RFC 3986 absolute URIs with a host for uri), and bounded
// in length so a sampled string ends.

#include <optional>
#include <string>

namespace ds::grammar {

// The contents (without the quotes) of a string of `format`; nullopt for a format not supported.
std::optional<std::string> string_format_gbnf(const std::string& format);
// The supported formats' names, for a refusal: "date, time, ...".
const char* supported_string_formats();

}  // namespace ds::grammar
