#include "device/backend.h"

#include <cstdlib>

#include "device/backend_plugin.h"
#include "device/cpu/cpu_backend.h"

namespace ds {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) owner_->release(data_, bytes_);
    owner_ = other.owner_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.owner_ = nullptr;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) owner_->release(data_, bytes_);
}

Result<std::unique_ptr<Backend>> create_backend(const std::string& device, int n_threads) {
  if (device == "cpu") return std::unique_ptr<Backend>(new CpuBackend(n_threads));
  const size_t colon = device.find(':');
  const std::string kind = device.substr(0, colon);
  if (kind == "cuda") {
    int number = 0;
    if (colon != std::string::npos) {
      char* end = nullptr;
      const long n = std::strtol(device.c_str() + colon + 1, &end, 10);
      if (end == device.c_str() + colon + 1 || *end != '\0' || n < 0 || n > 1024) {
        return Status::error("backend '" + device + "': expected cuda or cuda:N");
      }
      number = int(n);
    }
    return load_plugin_backend("cuda", number, n_threads);
  }
  return Status::error("backend '" + device + "': dsinfer runs on cpu or cuda[:N]");
}

}  // namespace ds
