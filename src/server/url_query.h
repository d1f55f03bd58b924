#pragma once
// A request target's query string ("limit=2&after=batch_x"), decoded:
// percent escapes and '+' as a space, each name at most once. What a route
// does not take is refused by name by its caller.

#include <map>
#include <string>

#include "base/status.h"

namespace ds {

// The parameters of `target` (path?query), or an error naming what is malformed.
Result<std::map<std::string, std::string>> parse_url_query(const std::string& target);

}  // namespace ds
