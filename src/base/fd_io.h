#pragma once
// Whole reads and writes on a file descriptor: retried across short transfers
// and signals. False on an error or an early end (errno says which error).

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace ds {

inline bool write_fully(int fd, const void* data, size_t n) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t at = 0; at < n;) {
    const ssize_t put = ::write(fd, bytes + at, n - at);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    at += size_t(put);
  }
  return true;
}

inline bool read_fully(int fd, void* out, size_t n) {
  auto* bytes = static_cast<uint8_t*>(out);
  for (size_t at = 0; at < n;) {
    const ssize_t got = ::read(fd, bytes + at, n - at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    at += size_t(got);
  }
  return true;
}

}  // namespace ds
