#include "grammar/number_range.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ds::grammar {
namespace {

constexpr int k_integer_digits = 16;        // json-integer's longest
constexpr int k_number_integer_digits = 9;  // a bounded number's integer part where a side is open
constexpr int k_significant_digits = 15;    // DBL_DIG
constexpr double k_max_integer_bound = 9007199254740992.0;  // 2^53: every integer up to it is a double
constexpr double k_max_number_bound = 1e15;

std::string join(const std::vector<std::string>& alternatives) {
  if (alternatives.size() == 1) return alternatives[0];
  std::string out;
  for (const std::string& a : alternatives) out += (out.empty() ? "(" : " | ") + a;
  return out + ")";
}

std::string digit_class(int from, int to) {
  const char a = char('0' + from), b = char('0' + to);
  return from == to ? std::string{'"', a, '"'} : std::string{'[', a, '-', b, ']'};
}

std::string quoted(const std::string& text) {
  std::string out = "\"";  // appended, not "\"" + text: GCC 12 warns falsely (-Wrestrict) on the latter
  out += text;
  out += '"';
  return out;
}

std::string any_digits(int n) { return n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}"; }

bool all_of(const std::string& s, char c) { return s.find_first_not_of(c) == std::string::npos; }

// Digit strings of a.size() digits (leading zeros kept) from a to b, a <= b.
std::string fixed_range(const std::string& a, const std::string& b) {
  if (a == b) return quoted(a);
  const std::string first(1, a[0]);
  const std::string ra = a.substr(1), rb = b.substr(1);
  if (a[0] == b[0]) return quoted(first) + " " + fixed_range(ra, rb);
  const size_t n = ra.size();
  const bool low_whole = all_of(ra, '0'), high_whole = all_of(rb, '9');
  std::vector<std::string> alternatives;
  if (!low_whole) alternatives.push_back(quoted(first) + " " + fixed_range(ra, std::string(n, '9')));
  const int from = a[0] - '0' + (low_whole ? 0 : 1), to = b[0] - '0' - (high_whole ? 0 : 1);
  if (from <= to) alternatives.push_back(n ? digit_class(from, to) + " " + any_digits(int(n)) : digit_class(from, to));
  if (!high_whole) alternatives.push_back(quoted(std::string(1, b[0])) + " " + fixed_range(std::string(n, '0'), rb));
  return join(alternatives);
}

// Decimal integers from low to high, without leading zeros.
std::string uint_range(uint64_t low, uint64_t high) {
  const std::string a = std::to_string(low), b = std::to_string(high);
  if (a.size() == b.size()) return fixed_range(a, b);
  std::vector<std::string> alternatives = {fixed_range(a, std::string(a.size(), '9'))};
  if (b.size() - a.size() >= 2) {
    alternatives.push_back(std::string("[1-9] [0-9]{") + std::to_string(a.size()) + "," + std::to_string(b.size() - 2) + "}");
  }
  std::string power_of_ten(b.size(), '0');
  power_of_ten[0] = '1';
  alternatives.push_back(fixed_range(power_of_ten, b));
  return join(alternatives);
}

uint64_t largest_with_digits(int digits) {
  uint64_t v = 0;
  for (int i = 0; i < digits; ++i) v = v * 10 + 9;
  return v;
}

// --- integers ---

Result<int64_t> integer_bound(const Bound& bound, bool is_low, const char* name) {
  if (!bound.value.is_int() && !bound.value.is_real()) return Status::error(std::string("'") + name + "' must be a number");
  const double v = bound.value.as_real();
  if (!(std::fabs(v) <= k_max_integer_bound)) return Status::error(std::string("'") + name + "' beyond 2^53 is not supported");
  if (bound.value.is_int()) {
    const int64_t i = bound.value.as_int();
    return bound.exclusive ? (is_low ? i + 1 : i - 1) : i;
  }
  if (is_low) return int64_t(bound.exclusive ? std::floor(v) + 1 : std::ceil(v));
  return int64_t(bound.exclusive ? std::ceil(v) - 1 : std::floor(v));
}

// --- numbers ---

// A non-negative decimal: its integer part and the digits after the point, without trailing zeros.
struct Decimal {
  uint64_t integer = 0;
  std::string fraction;
};

struct SignedBound {
  bool negative = false;  // below zero (never a negative zero)
  Decimal magnitude;
  bool exclusive = false;
};

Result<SignedBound> number_bound(const Bound& bound, const char* name) {
  if (!bound.value.is_int() && !bound.value.is_real()) return Status::error(std::string("'") + name + "' must be a number");
  const double v = bound.value.as_real();
  if (!(std::fabs(v) <= k_max_number_bound)) return Status::error(std::string("'") + name + "' beyond 1e15 is not supported");
  // The shortest decimal that reads back as v: the number the schema's text meant.
  char text[64];
  const auto written = std::to_chars(text, text + sizeof text, std::fabs(v), std::chars_format::fixed);
  const std::string digits(text, written.ptr);
  SignedBound out;
  out.negative = v < 0;
  out.exclusive = bound.exclusive;
  const size_t point = digits.find('.');
  out.magnitude.integer = std::stoull(digits.substr(0, point));
  if (point != std::string::npos) {
    out.magnitude.fraction = digits.substr(point + 1);
    while (!out.magnitude.fraction.empty() && out.magnitude.fraction.back() == '0') out.magnitude.fraction.pop_back();
  }
  if (out.magnitude.integer == 0 && out.magnitude.fraction.empty()) out.negative = false;
  return out;
}

// The digit strings S of 1..room digits, and whether the empty one, with
// 0.S at or above 0.low (above when low_exclusive) while `low` is given, at
// or below 0.high (below) while `high` is. A side is absent once a digit
// left it behind; `low` and `high` are without trailing zeros.
struct Fraction {
  std::optional<std::string> digits;
  bool empty = false;
};

Fraction fraction_digits(const std::optional<std::string>& low, bool low_exclusive, const std::optional<std::string>& high,
                         bool high_exclusive, int room) {
  Fraction f;
  f.empty = (!low || (low->empty() && !low_exclusive)) && (!high || !high_exclusive || !high->empty());
  if (room == 0) return f;
  if (!low && !high) {
    f.digits = room == 1 ? "[0-9]" : "[0-9]{1," + std::to_string(room) + "}";
    return f;
  }
  const int low_digit = low && !low->empty() ? (*low)[0] - '0' : 0;
  const int high_digit = high ? (high->empty() ? 0 : (*high)[0] - '0') : 9;
  auto rest = [](const std::optional<std::string>& s) { return s->empty() ? std::string() : s->substr(1); };
  std::vector<std::string> alternatives;
  auto digit_then = [&](int digit, const Fraction& after) {
    const std::string d = digit_class(digit, digit);
    if (after.digits) alternatives.push_back(d + " " + *after.digits + (after.empty ? "?" : ""));
    else if (after.empty) alternatives.push_back(d);
  };
  const int free_from = low ? low_digit + 1 : 0, free_to = high ? high_digit - 1 : 9;
  if (free_from <= free_to) alternatives.push_back(digit_class(free_from, free_to) + (room > 1 ? " [0-9]{0," + std::to_string(room - 1) + "}" : ""));
  if (low && high && low_digit == high_digit) {
    digit_then(low_digit, fraction_digits(rest(low), low_exclusive, rest(high), high_exclusive, room - 1));
  } else {
    if (low && (!high || low_digit < high_digit)) digit_then(low_digit, fraction_digits(rest(low), low_exclusive, std::nullopt, false, room - 1));
    if (high && (!low || low_digit < high_digit)) digit_then(high_digit, fraction_digits(std::nullopt, false, rest(high), high_exclusive, room - 1));
  }
  if (!alternatives.empty()) {
    std::string group = "(";  // whole, for a "?" after it
    group += join(alternatives);
    group += ')';
    f.digits = group;
  }
  return f;
}

// `integer` then the fractions f allows, as alternatives.
void with_fraction(const std::string& integer, const Fraction& f, std::vector<std::string>& alternatives) {
  if (f.digits) alternatives.push_back(integer + " (\".\" " + *f.digits + ")" + (f.empty ? "?" : ""));
  else if (f.empty) alternatives.push_back(integer);
}

// Magnitudes m, written without a sign, from low (exclusive or not) up to
// high (likewise; absent: integer parts of up to `open_digits` digits), with
// `room` digits after the point at most.
void magnitude_range(const Decimal& low, bool low_exclusive, const std::optional<Decimal>& high, bool high_exclusive, int open_digits,
                     int room, std::vector<std::string>& alternatives) {
  const std::string low_integer = quoted(std::to_string(low.integer));
  if (high && high->integer == low.integer) {
    with_fraction(low_integer, fraction_digits(low.fraction, low_exclusive, high->fraction, high_exclusive, room), alternatives);
    return;
  }
  if (high && high->integer < low.integer) return;
  with_fraction(low_integer, fraction_digits(low.fraction, low_exclusive, std::nullopt, false, room), alternatives);
  const uint64_t top = high ? high->integer - 1 : largest_with_digits(open_digits);
  if (low.integer + 1 <= top) {
    with_fraction(uint_range(low.integer + 1, top), fraction_digits(std::nullopt, false, std::nullopt, false, room), alternatives);
  }
  if (high) {
    with_fraction(quoted(std::to_string(high->integer)), fraction_digits(std::nullopt, false, high->fraction, high_exclusive, room),
                  alternatives);
  }
}

int digit_count(uint64_t v) { return int(std::to_string(v).size()); }

bool below(const SignedBound& a, const SignedBound& b) {  // a < b as numbers
  auto key = [](const SignedBound& s) {
    const double m = double(s.magnitude.integer) + std::stod("0." + s.magnitude.fraction + "0");
    return s.negative ? -m : m;
  };
  return key(a) < key(b);
}

}  // namespace

Result<std::string> integer_range_gbnf(const std::optional<Bound>& low, const std::optional<Bound>& high) {
  std::optional<int64_t> lo, hi;
  if (low) {
    auto v = integer_bound(*low, true, low->exclusive ? "exclusiveMinimum" : "minimum");
    if (!v.ok()) return v.status();
    lo = v.value();
  }
  if (high) {
    auto v = integer_bound(*high, false, high->exclusive ? "exclusiveMaximum" : "maximum");
    if (!v.ok()) return v.status();
    hi = v.value();
  }
  if (lo && hi && *lo > *hi) return Status::error("no integer is within the bounds");
  const uint64_t open = largest_with_digits(k_integer_digits);
  std::vector<std::string> alternatives;
  if (!lo || *lo < 0) {  // "-" then magnitudes
    const uint64_t from = hi && *hi < 0 ? uint64_t(-*hi) : 1, to = lo ? uint64_t(-*lo) : open;
    alternatives.push_back("\"-\" " + uint_range(from, to));
  }
  if (!hi || *hi >= 0) alternatives.push_back(uint_range(lo && *lo > 0 ? uint64_t(*lo) : 0, hi ? uint64_t(*hi) : open));
  return join(alternatives);
}

Result<std::string> number_range_gbnf(const std::optional<Bound>& low, const std::optional<Bound>& high) {
  std::optional<SignedBound> lo, hi;
  if (low) {
    auto v = number_bound(*low, low->exclusive ? "exclusiveMinimum" : "minimum");
    if (!v.ok()) return v.status();
    lo = v.value();
  }
  if (high) {
    auto v = number_bound(*high, high->exclusive ? "exclusiveMaximum" : "maximum");
    if (!v.ok()) return v.status();
    hi = v.value();
  }
  if (lo && hi && below(*hi, *lo)) return Status::error("no number is within the bounds");
  // Integer digits at most, then what is left of 15 significant digits after the point.
  int integer_digits = (lo && hi) ? 0 : k_number_integer_digits;
  for (const auto& b : {lo, hi}) {
    if (b) integer_digits = std::max(integer_digits, digit_count(b->magnitude.integer));
  }
  const int room = std::max(0, k_significant_digits - integer_digits);
  std::vector<std::string> alternatives, negative;
  if (!lo || lo->negative) {
    // x < 0 as "-" m: m above -hi (or above 0), up to -lo.
    const bool high_negative = hi && hi->negative;
    magnitude_range(high_negative ? hi->magnitude : Decimal{}, high_negative ? hi->exclusive : true,
                    lo ? std::optional<Decimal>(lo->magnitude) : std::nullopt, lo && lo->exclusive, integer_digits, room, negative);
    if (!negative.empty()) alternatives.push_back("\"-\" " + join(negative));
  }
  if (!hi || !hi->negative) {
    const bool low_positive = lo && !lo->negative;
    magnitude_range(low_positive ? lo->magnitude : Decimal{}, low_positive && lo->exclusive,
                    hi ? std::optional<Decimal>(hi->magnitude) : std::nullopt, hi && hi->exclusive, integer_digits, room, alternatives);
  }
  if (alternatives.empty()) return Status::error("no number is within the bounds");
  return join(alternatives);
}

}  // namespace ds::grammar
