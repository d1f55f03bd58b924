#pragma once
// Error values for load, parse and I/O failures (STYLE.md: three error channels).
// Broken invariants use DS_CHECK (abort with a message); expected outcomes use
// Status / Result<T>; no exception crosses the library boundary.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
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

// Runs a loader and turns any exception it throws (std::bad_alloc from a
// crafted size, a library's own throw) into an error naming `what`, so that
// no exception crosses the library boundary.
template <typename F>
auto catching_exceptions(const char* what, F&& load) -> decltype(load()) {
  try {
    return load();
  } catch (const std::bad_alloc&) {
    return Status::error(std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    return Status::error(std::string(what) + ": " + e.what());
  }
}

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
