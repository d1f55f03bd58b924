#pragma once
// Memory sizes as operators write them on the command line.

#include <cstdint>
#include <string>

#include "base/status.h"

namespace ds {

// Bytes in "1073741824", "512M", "4G", "1.5GiB" (K/M/G/T are binary) or, for a
// number in (0, 1], that fraction of the memory available now.
Result<int64_t> parse_memory_size(const std::string& text);

// MemAvailable from /proc/meminfo; 0 when it cannot be read.
int64_t available_memory_bytes();

}  // namespace ds
