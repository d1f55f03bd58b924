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

const char* backend_op_name(BackendOp op) {
  switch (op) {
    case BackendOp::embed: return "embed";
    case BackendOp::rms_norm: return "rms_norm";
    case BackendOp::matmul: return "matmul";
    case BackendOp::matmul_batched: return "matmul_batched";
    case BackendOp::add_bias: return "add_bias";
    case BackendOp::rope_kv_write: return "rope_kv_write";
    case BackendOp::copy_heads: return "copy_heads";
    case BackendOp::paged_attention: return "paged_attention";
    case BackendOp::mla_expanded_attention: return "mla_expanded_attention";
    case BackendOp::silu_mul: return "silu_mul";
    case BackendOp::add: return "add";
    case BackendOp::gather_rows: return "gather_rows";
    case BackendOp::moe_experts: return "moe_experts";
    case BackendOp::layer_norm: return "layer_norm";
    case BackendOp::indexer_select: return "indexer_select";
    case BackendOp::sparse_attention: return "sparse_attention";
    case BackendOp::rope_rows: return "rope_rows";
    case BackendOp::swiglu: return "swiglu";
    case BackendOp::hyper_connection: return "hyper_connection";
    case BackendOp::kv_compress: return "kv_compress";
    case BackendOp::compressed_attention: return "compressed_attention";
  }
  return "?";
}

bool Backend::implements(BackendOp op) const {
  switch (op) {
    case BackendOp::mla_expanded_attention: return expands_mla();
    case BackendOp::layer_norm:
    case BackendOp::indexer_select:
    case BackendOp::sparse_attention: return has_sparse_attention();
    case BackendOp::rope_rows:
    case BackendOp::swiglu:
    case BackendOp::hyper_connection:
    case BackendOp::kv_compress:
    case BackendOp::compressed_attention: return has_compressed_attention();
    case BackendOp::embed:
    case BackendOp::rms_norm:
    case BackendOp::matmul:
    case BackendOp::matmul_batched:
    case BackendOp::add_bias:
    case BackendOp::rope_kv_write:
    case BackendOp::copy_heads:
    case BackendOp::paged_attention:
    case BackendOp::silu_mul:
    case BackendOp::add:
    case BackendOp::gather_rows:
    case BackendOp::moe_experts: return true;
  }
  return false;
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

namespace {

void refuse_compressed(const Backend& b, const char* op) {
  DS_CHECK(false, b.name() + ": no " + op + " (has_compressed_attention() is false)");
}

}  // namespace

void Backend::rope_rows(const RopeParams&, const int32_t*, int64_t, const HeadRows&, int64_t) { refuse_compressed(*this, "rope_rows"); }
void Backend::swiglu(float*, float*, int64_t, float) { refuse_compressed(*this, "swiglu"); }
void Backend::hyper_connection_pre(const HyperConnectionParams&, const float*, const float*, int64_t, float*, float*, float*) {
  refuse_compressed(*this, "hyper_connection_pre");
}
void Backend::hyper_connection_post(const HyperConnectionParams&, float*, const float*, const float*, const float*, int64_t) {
  refuse_compressed(*this, "hyper_connection_post");
}
void Backend::hyper_connection_head(const HyperConnectionParams&, const float*, const float*, int64_t, float*) {
  refuse_compressed(*this, "hyper_connection_head");
}
void Backend::kv_compress(const KvCompressorParams&, const StepIndex&, int64_t, const float*, const float*, const KvLayerView&,
                          const KvLayerView&) {
  refuse_compressed(*this, "kv_compress");
}
void Backend::compressed_attention(const CompressedAttentionParams&, const StepIndex&, int64_t, const float*, const KvLayerView&,
                                   const KvLayerView&, const int32_t*, const int32_t*, float*) {
  refuse_compressed(*this, "compressed_attention");
}

}  // namespace ds
