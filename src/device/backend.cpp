#include "device/backend.h"

#include "device/backend_plugin.h"
#include "device/cpu/cpu_backend.h"
#include "device/device.h"

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

void Backend::mla_expanded_attention(const KvLayerView&, const AttentionShape&, const StepIndex&, int64_t, int64_t, const float*,
                                     int64_t, const WeightMatrix*, const WeightMatrix*, float*, int64_t) {
  DS_CHECK(false, name() + ": no expanded MLA form (expands_mla() is false)");
}

void Backend::layer_norm(const float*, const float*, const float*, float, int64_t, int64_t, float*) {
  DS_CHECK(false, name() + ": no layer_norm (has_sparse_attention() is false)");
}

void Backend::indexer_select(const KvLayerView&, const StepIndex&, const float*, int64_t, const float*, float, int64_t, int32_t*, int32_t*) {
  DS_CHECK(false, name() + ": no indexer_select (has_sparse_attention() is false)");
}

void Backend::sparse_attention(const KvLayerView&, const AttentionShape&, const StepIndex&, const float*, const int32_t*,
                               const int32_t*, int64_t, float*) {
  DS_CHECK(false, name() + ": no sparse_attention (has_sparse_attention() is false)");
}

Result<std::unique_ptr<Backend>> create_backend(const std::string& device, int n_threads) {
  if (device != "cpu") {
    auto spec = parse_device(device);
    if (!spec.ok()) return spec.status();
    if (spec.value().gpu >= 0) return load_plugin_backend("cuda", spec.value().gpu, n_threads);
  }
  return std::unique_ptr<Backend>(new CpuBackend(n_threads));
}

}  // namespace ds
