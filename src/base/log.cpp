#include "base/log.h"

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

namespace ds {
namespace {

std::mutex g_mutex;
LogLevel g_level = LogLevel::info;
LogSink g_sink;

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warn: return "warn";
    case LogLevel::error: return "error";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) {
  std::lock_guard lock(g_mutex);
  g_level = level;
}

void set_log_sink(LogSink sink) {
  std::lock_guard lock(g_mutex);
  g_sink = std::move(sink);
}

void log_message(LogLevel level, const char* format, ...) {
  std::lock_guard lock(g_mutex);
  if (level < g_level) return;
  // Formatted in full whatever its length: a cut JSON line (an access-log
  // line with its prompt) would no longer parse.
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  char small[2048];
  const int n = std::vsnprintf(small, sizeof(small), format, args);
  va_end(args);
  std::string message;
  if (n >= int(sizeof(small))) {
    message.resize(size_t(n));
    std::vsnprintf(message.data(), size_t(n) + 1, format, again);
  } else {
    message = n > 0 ? small : "";
  }
  va_end(again);
  if (g_sink) {
    g_sink(level, message);
  } else {
    std::fprintf(stderr, "[%s] %s\n", level_name(level), message.c_str());
  }
}

}  // namespace ds
