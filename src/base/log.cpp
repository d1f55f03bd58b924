#include "base/log.h"

#include <cstdarg>
#include <cstdio>
#include <mutex>

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
  char buffer[2048];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  if (g_sink) {
    g_sink(level, buffer);
  } else {
    std::fprintf(stderr, "[%s] %s\n", level_name(level), buffer);
  }
}

}  // namespace ds
