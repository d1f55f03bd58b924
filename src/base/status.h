#pragma once
// Error values for load, parse and I/O failures (STYLE.md: three error channels).
// Broken invariants use DS_CHECK (abort with a message); expected outcomes use
// Status / Result<T>; no exception crosses the library boundary.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace ds {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}
  Result(Status status) : value_(std::move(status)) {}

  bool ok() const { return std::holds_alternative<T>(value_); }
  T& value() { return std::get<T>(value_); }
  const T& value() const { return std::get<T>(value_); }
  T take() { return std::move(std::get<T>(value_)); }
  Status status() const { return ok() ? Status() : std::get<Status>(value_); }
  const std::string& message() const {
    static const std::string empty;
    return ok() ? empty : std::get<Status>(value_).message();
  }

 private:
  std::variant<T, Status> value_;
};

[[noreturn]] inline void check_failed(const char* expr, const char* file, int line,
                                      const std::string& message) {
  std::fprintf(stderr, "dsinfer: invariant broken at %s:%d: %s %s\n", file, line, expr,
               message.c_str());
  std::abort();
}

}  // namespace ds

#define DS_CHECK(cond, ...)                                                   \
  do {                                                                        \
    if (!(cond)) ::ds::check_failed(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
  } while (0)

// Propagates a failed Status from an expression returning Status.
#define DS_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::ds::Status ds_status_ = (expr);       \
    if (!ds_status_.ok()) return ds_status_; \
  } while (0)
