#include "device/cpu/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "base/memory_size.h"
#include "kernels/cpu_features.h"
#include "kernels/elementwise.h"
#include "kernels/interleaved_rows.h"
#include "kernels/rope.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

// Below this many elements an element-wise op runs on the calling thread: a
// hand-off to the pool costs more than the work.
constexpr int64_t k_min_parallel_elements = 1 << 15;

}  // namespace

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads) {}

CpuBackend::~CpuBackend() = default;

std::string CpuBackend::name() const {
  return std::string("cpu (") + kernel_isa_name() + ", " + std::to_string(pool_.n_threads()) + " threads)";
}

MemoryInfo CpuBackend::memory_info() const {
  return MemoryInfo{int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE)), available_memory_bytes()};
}

Result<DeviceBuffer> CpuBackend::allocate(size_t bytes) {
  if (bytes == 0) return DeviceBuffer();
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return Status::error("cpu backend: cannot allocate " + format_memory_size(int64_t(bytes)));
  madvise(mem, bytes, MADV_HUGEPAGE);
  return DeviceBuffer(this, mem, bytes);
}

void CpuBackend::release(void* data, size_t bytes) { munmap(data, bytes); }

void CpuBackend::upload(void* device_dst, const void* host_src, size_t bytes) {
  if (device_dst != host_src) std::memcpy(device_dst, host_src, bytes);
}

void CpuBackend::download(void* host_dst, const void* device_src, size_t bytes) {
  if (host_dst != device_src) std::memcpy(host_dst, device_src, bytes);
}

bool CpuBackend::repacks(DType type, int64_t n_rows, int64_t n_cols) const { return interleavable(type, n_rows, n_cols); }

void CpuBackend::store_matrix(DType type, int64_t n_rows, int64_t n_cols, const uint8_t* host_rows, uint8_t* device_dst,
                              bool repack) {
  if (repack) {
    interleave_rows(type, n_rows, n_cols, host_rows, device_dst);
  } else {
    std::memcpy(device_dst, host_rows, size_t(n_rows * row_bytes(type, n_cols)));
  }
}

void CpuBackend::embed(const WeightMatrix& table, const StepIndex& step, float* out) {
  DS_CHECK(!table.repacked, "embed: the table must keep the row layout");
  const int64_t row_stride = table.row_stride_bytes();
  pool_.parallel_for(step.n_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      dequantize_row(table.type, table.data + step.tokens[t] * row_stride, out + t * table.n_cols, table.n_cols);
    }
  });
}

void CpuBackend::rms_norm(const float* in, int64_t in_stride, const float* weight, float eps, int64_t n, int64_t dim, float* out,
                          int64_t out_stride) {
  pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) ds::rms_norm(in + t * in_stride, weight, eps, 1, dim, out + t * out_stride);
  });
}

void CpuBackend::layer_norm(const float* in, const float* weight, const float* bias, float eps, int64_t n, int64_t dim, float* out) {
  pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
    ds::layer_norm(in + begin * dim, weight, bias, eps, end - begin, dim, out + begin * dim);
  });
}

void CpuBackend::indexer_select(const KvLayerView& keys, const StepIndex& step, const float* q, int64_t n_heads, const float* weights, float weight_scale,
                                int64_t top_k, int32_t* selected, int32_t* n_selected) {
  ds::indexer_select(pool_, keys, q, n_heads, weights, weight_scale, step.n_tokens, step.positions, step.seq_of_token, step.tables, top_k, selected,
                     n_selected, sparse_scratch_);
}

void CpuBackend::sparse_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const float* q,
                                  const int32_t* selected, const int32_t* n_selected, int64_t top_k, float* out) {
  ds::sparse_attention(pool_, kv, shape, q, step.n_tokens, step.seq_of_token, step.tables, selected, n_selected, top_k, out,
                       sparse_scratch_);
}

void CpuBackend::matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) { ds::matmul(pool_, w, x, n, y, matmul_scratch_); }

void CpuBackend::matmul_batched(const WeightMatrix* w, int64_t n_mats, const float* x, int64_t x_token_stride, int64_t x_mat_stride,
                                int64_t n, float* y, int64_t y_token_stride, int64_t y_mat_stride) {
  ds::matmul_batched(pool_, w, n_mats, x, x_token_stride, x_mat_stride, n, y, y_token_stride, y_mat_stride, matmul_scratch_);
}

void CpuBackend::add_bias(float* y, const float* bias, int64_t n, int64_t dim) { ds::add_bias(y, bias, n, dim); }

void CpuBackend::rope_kv_write(const RopeParams& rope, const StepIndex& step, const HeadRows& q, const HeadRows& k,
                               const KvLayerView& kv, const float* k_rows, const float* v_rows) {
  // Token by token range, so that a token's rows are still in cache when they are stored.
  pool_.parallel_for(step.n_tokens, [&](int64_t begin, int64_t end) {
    const int32_t* positions = step.positions + begin;
    rope_strided(rope, q.data + begin * q.token_stride, end - begin, q.n_heads, q.head_dim, q.token_stride, q.head_stride, positions,
                 step.n_ctx);
    rope_strided(rope, k.data + begin * k.token_stride, end - begin, k.n_heads, k.head_dim, k.token_stride, k.head_stride, positions,
                 step.n_ctx);
    kv_write(kv, k_rows + begin * kv.kv_dim, v_rows ? v_rows + begin * kv.kv_dim : nullptr, end - begin, positions,
             step.seq_of_token + begin, step.tables);
  });
}

void CpuBackend::copy_heads(const HeadRows& dst, const HeadRows& src, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < src.n_heads; ++h) {
      std::memcpy(dst.data + t * dst.token_stride + h * dst.head_stride, src.data + t * src.token_stride + h * src.head_stride,
                  size_t(src.head_dim) * sizeof(float));
    }
  }
}

void CpuBackend::paged_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const float* q,
                                 float* out) {
  ds::paged_attention(pool_, kv, shape, q, step.n_tokens, step.positions, step.seq_of_token, step.tables, out, attention_scratch_);
}

void CpuBackend::silu_mul(float* gate, const float* up, int64_t n) {
  if (n < k_min_parallel_elements) return ds::silu_mul(gate, up, n);
  pool_.parallel_for(n, [&](int64_t begin, int64_t end) { ds::silu_mul(gate + begin, up + begin, end - begin); });
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
  if (n < k_min_parallel_elements) return add_inplace(y, x, n);
  pool_.parallel_for(n, [&](int64_t begin, int64_t end) { add_inplace(y + begin, x + begin, end - begin); });
}

void CpuBackend::gather_rows(const float* src, int64_t dim, const int32_t* rows, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dim, src + int64_t(rows[i]) * dim, size_t(dim) * sizeof(float));
}

}  // namespace ds
