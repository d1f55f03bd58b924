#pragma once
// GBNF for the JSON integers and numbers within bounds: JSON Schema's
// minimum, maximum, exclusiveMinimum and exclusiveMaximum made into digit
// grammars, exact for any range (as llama.cpp's schema converter builds them
// for integers). An unbounded side stops at 16 digits for integers (as the
// json-integer primitive does), 9 for numbers' integer part.
//
// A bounded number is written without an exponent, with at most 15
// significant digits in all: then two such decimals are different doubles,
// so an exclusive bound holds after the reader rounds the text to a double,
// not only in decimal (DBL_DIG is 15).

#include <optional>
#include <string>

#include "base/status.h"
#include "template/jinja_value.h"

namespace ds::grammar {

// One side of a range: a JSON number from the schema, and whether the value
// may not equal it (exclusiveMinimum, exclusiveMaximum).
struct Bound {
  jinja::Value value;
  bool exclusive = false;
};

// The integers in [low, high] (an absent side is unbounded); an error when
// a bound is not a number, beyond 2^53 in magnitude, or the range is empty.
Result<std::string> integer_range_gbnf(const std::optional<Bound>& low, const std::optional<Bound>& high);
// The numbers likewise; bounds within 1e15 in magnitude.
Result<std::string> number_range_gbnf(const std::optional<Bound>& low, const std::optional<Bound>& high);

}  // namespace ds::grammar
