#include "base/memory_size.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace ds {

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

int64_t resident_memory_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

std::string format_memory_size(int64_t bytes) {
  char text[32];
  if (bytes >= int64_t(1) << 30) {
    std::snprintf(text, sizeof text, "%.2f GiB", double(bytes) / double(int64_t(1) << 30));
  } else {
    std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / double(1 << 20));
  }
  return text;
}

Result<int64_t> parse_memory_size(const std::string& text) {
  const auto invalid = [&] {
    return Status::error("'" + text + "' is not a memory size (bytes, 512M, 4G, or a fraction like 0.3 of free memory)");
  };
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || !std::isfinite(number) || number <= 0) return invalid();
  std::string suffix(end);
  if (suffix.size() == 3 && suffix.substr(1) == "iB") suffix = suffix.substr(0, 1);
  if (suffix.size() == 2 && (suffix[1] == 'B' || suffix[1] == 'b')) suffix = suffix.substr(0, 1);
  double bytes = number;
  if (suffix.empty()) {
    if (number <= 1.0 && text.find('.') != std::string::npos) {
      const int64_t available = available_memory_bytes();
      if (available <= 0) return Status::error("cannot read the available memory from /proc/meminfo for '" + text + "'");
      bytes = number * double(available);
    }
  } else {
    static const std::string units = "KMGT";
    const size_t power = units.find(char(std::toupper(static_cast<unsigned char>(suffix[0]))));
    if (suffix.size() != 1 || power == std::string::npos) return invalid();
    bytes = number * std::pow(1024.0, double(power + 1));
  }
  if (bytes < 1 || bytes > 9.0e18) return invalid();
  return int64_t(bytes);
}

}  // namespace ds
