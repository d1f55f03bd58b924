#include "template/jinja_printf.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/utf8.h"

namespace ds::jinja {
namespace {

struct Spec {
  bool left = false, plus = false, space = false, alternate = false, zero = false;
  int64_t width = 0;
  int64_t precision = -1;
  char conversion = 's';
};

[[noreturn]] void type_error(const std::string& message) { throw TemplateError("TypeError: " + message); }

std::string pad(std::string body, const Spec& s, bool numeric, size_t sign_prefix_length) {
  const int64_t length = int64_t(utf8_length(body));
  if (length >= s.width) return body;
  const size_t fill = size_t(s.width - length);
  if (s.left) return body + std::string(fill, ' ');
  if (numeric && s.zero) return body.insert(sign_prefix_length, std::string(fill, '0'));
  return std::string(fill, ' ') + body;
}

std::string integer(const Value& v, const Spec& s) {
  if (!v.is_number()) type_error(std::string("%") + s.conversion + " format: a real number is required, not " + v.type_name());
  if (v.is_real() && !std::isfinite(v.as_real())) throw TemplateError("OverflowError: cannot convert float infinity or NaN to integer");
  const int64_t i = v.is_real() ? int64_t(v.as_real()) : v.as_int();
  const uint64_t magnitude = i < 0 ? uint64_t(0) - uint64_t(i) : uint64_t(i);
  char digits[32];
  const char c = s.conversion;
  std::snprintf(digits, sizeof digits, c == 'x' ? "%llx" : c == 'X' ? "%llX" : c == 'o' ? "%llo" : "%llu", (unsigned long long)magnitude);
  std::string body = digits;
  if (s.precision > int64_t(body.size())) body.insert(0, size_t(s.precision - int64_t(body.size())), '0');
  std::string prefix = i < 0 ? "-" : s.plus ? "+" : s.space ? " " : "";
  if (s.alternate && (c == 'x' || c == 'X' || c == 'o')) prefix += c == 'o' ? "0o" : c == 'x' ? "0x" : "0X";
  return pad(prefix + body, s, true, prefix.size());
}

std::string real(const Value& v, const Spec& s) {
  if (!v.is_number()) type_error(std::string("must be real number, not ") + v.type_name());
  const double d = v.as_real();
  std::string format = "%";
  if (s.plus) format += '+';
  if (s.space) format += ' ';
  if (s.alternate) format += '#';
  format += ".*";
  format += s.conversion;
  char text[512];
  std::snprintf(text, sizeof text, format.c_str(), int(s.precision < 0 ? 6 : std::min<int64_t>(s.precision, 300)), d);
  const std::string body = text;
  const size_t sign = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
  return pad(body, s, std::isfinite(d), sign);
}

std::string text(const Value& v, const Spec& s) {
  std::string body = s.conversion == 'r' ? v.repr() : v.str();
  if (s.precision >= 0 && int64_t(utf8_length(body)) > s.precision) {
    size_t at = 0;
    for (int64_t n = 0; n < s.precision; ++n) at += std::max<size_t>(1, utf8_sequence_length(uint8_t(body[at])));
    body.resize(at);
  }
  return pad(body, s, false, 0);
}

std::string character(const Value& v, const Spec& s) {
  std::string body;
  if (v.is_int()) {
    if (v.as_int() < 0 || v.as_int() > 0x10FFFF) throw TemplateError("OverflowError: %c arg not in range(0x110000)");
    append_utf8(body, uint32_t(v.as_int()));
  } else if (v.is_string() && utf8_length(v.as_string()) == 1) {
    body = v.as_string();
  } else {
    type_error("%c requires int or char");
  }
  return pad(body, s, false, 0);
}

}  // namespace

std::string printf_format(const std::string& format, const Value& args) {
  const bool mapping = args.is_dict();
  const List positional = args.is_tuple() ? args.as_list() : List{args};
  size_t next = 0;
  auto take = [&]() -> const Value& {
    if (next >= positional.size()) type_error("not enough arguments for format string");
    return positional[next++];
  };
  auto number = [&](int64_t& out) {
    const Value& v = take();
    if (!v.is_int()) type_error("* wants int");
    out = v.as_int();
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) throw TemplateError("ValueError: incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) throw TemplateError("ValueError: incomplete format key");
      if (!mapping) type_error("format requires a mapping");
      value = args.as_dict().find(format.substr(i + 1, close - i - 1));
      if (!value) throw TemplateError("KeyError: '" + format.substr(i + 1, close - i - 1) + "'");
      i = close + 1;
    }
    Spec s;
    for (; i < format.size(); ++i) {
      const char f = format[i];
      if (f == '-') s.left = true;
      else if (f == '+') s.plus = true;
      else if (f == ' ') s.space = true;
      else if (f == '#') s.alternate = true;
      else if (f == '0') s.zero = true;
      else break;
    }
    if (i < format.size() && format[i] == '*') {
      number(s.width);
      if (s.width < 0) s.left = true, s.width = -s.width;
      ++i;
    } else {
      for (; i < format.size() && std::isdigit(uint8_t(format[i])); ++i) s.width = std::min<int64_t>(s.width * 10 + (format[i] - '0'), 1 << 20);
    }
    if (i < format.size() && format[i] == '.') {
      s.precision = 0;
      if (++i < format.size() && format[i] == '*') {
        number(s.precision);
        ++i;
      } else {
        for (; i < format.size() && std::isdigit(uint8_t(format[i])); ++i) s.precision = std::min<int64_t>(s.precision * 10 + (format[i] - '0'), 1 << 20);
      }
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;  // length modifiers: ignored, as Python does
    if (i >= format.size()) throw TemplateError("ValueError: incomplete format");
    s.conversion = format[i];
    if (s.conversion == '%') {
      out += '%';
      continue;
    }
    const Value& v = value ? *value : take();
    switch (s.conversion) {
      case 's':
      case 'r':
      case 'a': out += text(v, s); break;
      case 'd':
      case 'i':
      case 'u':
        s.conversion = 'd';
        out += integer(v, s);
        break;
      case 'x':
      case 'X':
      case 'o': out += integer(v, s); break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': out += real(v, s); break;
      case 'c': out += character(v, s); break;
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "%x", uint8_t(s.conversion));
        throw TemplateError(std::string("ValueError: unsupported format character '") + s.conversion + "' (0x" + hex + ")");
      }
    }
  }
  if (!mapping && next < positional.size()) type_error("not all arguments converted during string formatting");
  return out;
}

}  // namespace ds::jinja
