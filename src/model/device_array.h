#pragma once
// Rows of T (f32 unless said) in a backend's memory: a block's workspace,
// grown to the largest step seen.

#include <cstdint>

#include "base/status.h"
#include "device/backend.h"

namespace ds {

template <typename T>
class DeviceArrayOf {
 public:
  // At least n elements; the contents are not kept when it grows.
  Status reserve(Backend& backend, int64_t n) {
    const size_t bytes = size_t(n) * sizeof(T);
    if (buffer_.bytes() >= bytes) return Status();
    auto grown = backend.allocate(bytes);
    if (!grown.ok()) return grown.status();
    buffer_ = grown.take();
    return Status();
  }
  T* data() const { return reinterpret_cast<T*>(buffer_.data()); }

 private:
  DeviceBuffer buffer_;
};

using DeviceArray = DeviceArrayOf<float>;

}  // namespace ds
