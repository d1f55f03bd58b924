#pragma once
// f32 rows in a backend's memory: a block's workspace, grown to the largest step seen.

#include <cstdint>

#include "base/status.h"
#include "device/backend.h"

namespace ds {

class DeviceArray {
 public:
  // At least n floats; the contents are not kept when it grows.
  Status reserve(Backend& backend, int64_t n) {
    const size_t bytes = size_t(n) * sizeof(float);
    if (buffer_.bytes() >= bytes) return Status();
    auto grown = backend.allocate(bytes);
    if (!grown.ok()) return grown.status();
    buffer_ = grown.take();
    return Status();
  }
  float* data() const { return buffer_.f32(); }

 private:
  DeviceBuffer buffer_;
};

}  // namespace ds
