#pragma once
// Levelled logging with a pluggable sink. Default sink: stderr.

#include <functional>
#include <string>

namespace ds {

enum class LogLevel { debug, info, warn, error };

using LogSink = std::function<void(LogLevel, const std::string&)>;

void set_log_level(LogLevel level);
void set_log_sink(LogSink sink);
void log_message(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ds

#define DS_LOG_DEBUG(...) ::ds::log_message(::ds::LogLevel::debug, __VA_ARGS__)
#define DS_LOG_INFO(...) ::ds::log_message(::ds::LogLevel::info, __VA_ARGS__)
#define DS_LOG_WARN(...) ::ds::log_message(::ds::LogLevel::warn, __VA_ARGS__)
#define DS_LOG_ERROR(...) ::ds::log_message(::ds::LogLevel::error, __VA_ARGS__)
