#pragma once
// Wall-clock seconds since the epoch: the `created` fields of API objects and
// the ages of stored rows.

#include <chrono>
#include <cstdint>

namespace ds {

inline int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace ds
