#pragma once
// Python's printf-style string formatting, `format % args` in a template:
// conversions s r d i u f F e E g G x X o c and %, with flags (- + space # 0),
// width and precision (either may be *), positional arguments (a tuple, or
// one value) or named ones (%(name)s from a dict). What Python refuses
// (too few or too many arguments, %d of a string) is a TemplateError.

#include <string>

#include "template/jinja_value.h"

namespace ds::jinja {

std::string printf_format(const std::string& format, const Value& args);

}  // namespace ds::jinja
