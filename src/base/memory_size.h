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

// This process's resident set (VmRSS); 0 when it cannot be read.
int64_t resident_memory_bytes();

// "1.5 GiB", "320.0 MiB": a size as a log line or an error message shows it.
std::string format_memory_size(int64_t bytes);

}  // namespace ds
