// The CUDA backend, built as libdsinfer_cuda.so where nvcc is present and
// loaded by device/backend_plugin.cpp when a command asks for `cuda:N`: the
// binary links nothing of CUDA, so a host without a GPU or its libraries runs
// the CPU backend as before. Weights and KV pages live in device memory
// (cudaMalloc, never managed memory); F32/F16/BF16 matrices go through cuBLAS
// (f32 accumulation, no TF32), the quantized types through cuda_matmul.cu's
// kernels at decode sizes and, for longer batches, through row chunks
// dequantized to f32 for cuBLAS. MoE routing runs on the host: the router's
// logits come back, the tokens go to their experts (kernels/moe_route.h), and
// each active expert runs on its gathered rows. Ops run in order on one stream.

#include <cublas_v2.h>

#include <algorithm>
#include <string>
#include <vector>

#include "device/cuda/cuda_common.cuh"
#include "device/cuda/cuda_launch.h"
#include "kernels/moe_route.h"  // the reference routing, run on the host over the router's logits
#include "tensor/dtype.h"

#define DS_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                          \
    const cublasStatus_t ds_cublas_status = (call);                                             \
    DS_CHECK(ds_cublas_status == CUBLAS_STATUS_SUCCESS, std::string(#call) + ": " +             \
                                                            cublasGetStatusString(ds_cublas_status)); \
  } while (0)

namespace ds {
namespace {

// Weight rows dequantized at a time for the cuBLAS path of quantized types.
constexpr size_t k_dequantized_bytes = size_t(256) << 20;
// Tokens at or below this go through matvec (each weight row read once).
constexpr int64_t k_matvec_tokens = 8;

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, int n_host_threads, std::string name)
      : device_(device), name_(std::move(name)), host_pool_(n_host_threads) {
    DS_CUDA_CHECK(cudaSetDevice(device_));
    DS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DS_CUBLAS_CHECK(cublasCreate(&cublas_));
    DS_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    DS_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_PEDANTIC_MATH));  // no TF32, no reduced-precision sums
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }
  MemoryInfo memory_info() const override {
    size_t free = 0, total = 0;
    DS_CUDA_CHECK(cudaSetDevice(device_));
    DS_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    int clock_khz = 0, bus_bits = 0;  // double data rate: two transfers per clock
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device_);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device_);
    return MemoryInfo{int64_t(total), int64_t(free), 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0};
  }
  Result<DeviceBuffer> allocate(size_t bytes) override {
    if (bytes == 0) return DeviceBuffer();
    DS_CUDA_CHECK(cudaSetDevice(device_));
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, bytes);
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear it: an allocation that failed leaves the context usable
      return Status::error(name_ + ": cannot allocate " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(status));
    }
    return DeviceBuffer(this, data, bytes);
  }
  void upload(void* device_dst, const void* host_src, size_t bytes) override {
    DS_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    DS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void download(void* host_dst, const void* device_src, size_t bytes) override {
    DS_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
    DS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  bool reads_host_memory() const override { return false; }
  // W8A8 (I8 rows with row scales) has no CUDA kernel yet: such a model is refused at load.
  bool supports(DType type) const override { return type != DType::i8 && is_compute_supported(type); }
  bool repacks(DType, int64_t, int64_t) const override { return false; }
  void store_matrix(DType type, int64_t n_rows, int64_t n_cols, const uint8_t* host_rows, uint8_t* device_dst, bool) override {
    DS_CUDA_CHECK(cudaSetDevice(device_));  // the loader's copy threads each make the device theirs
    DS_CUDA_CHECK(cudaMemcpy(device_dst, host_rows, size_t(n_rows * row_bytes(type, n_cols)), cudaMemcpyHostToDevice));
  }
  ThreadPool& host_pool() override { return host_pool_; }
  NativeQueue native_queue() override { return {"cuda", device_, stream_}; }

  StepIndex upload_step(const StepIndex& host) override {
    DS_CUDA_CHECK(cudaSetDevice(device_));
    const int64_t n = host.n_tokens, n_table_sets = host.window_tables ? 2 : 1;
    int64_t n_pages = 0;
    for (int64_t s = 0; s < host.n_tables; ++s) {
      n_pages += host.tables[s].n_pages + (host.window_tables ? host.window_tables[s].n_pages : 0);
    }
    const size_t ints = size_t(3 * n + n_pages), tables_at = (ints * sizeof(int32_t) + 15) / 16 * 16;
    const size_t bytes = tables_at + size_t(n_table_sets * host.n_tables) * sizeof(BlockTableView);
    staging_.resize(bytes);
    uint8_t* base = grown(step_memory_, bytes);
    auto* ints_host = reinterpret_cast<int32_t*>(staging_.data());
    std::copy_n(host.tokens, n, ints_host);
    std::copy_n(host.positions, n, ints_host + n);
    std::copy_n(host.seq_of_token, n, ints_host + 2 * n);
    // The block tables, then the window tables (KvStream::windowed) where the step has them.
    auto* tables = reinterpret_cast<BlockTableView*>(staging_.data() + tables_at);
    int64_t at = 3 * n;
    for (int64_t set = 0; set < n_table_sets; ++set) {
      const BlockTableView* from = set == 0 ? host.tables : host.window_tables;
      for (int64_t s = 0; s < host.n_tables; ++s) {
        std::copy_n(from[s].pages, from[s].n_pages, ints_host + at);
        tables[set * host.n_tables + s] = BlockTableView{reinterpret_cast<const int32_t*>(base) + at, from[s].n_pages};
        at += from[s].n_pages;
      }
    }
    upload(base, staging_.data(), bytes);
    const auto* device_ints = reinterpret_cast<const int32_t*>(base);
    const auto* device_tables = reinterpret_cast<const BlockTableView*>(base + tables_at);
    return StepIndex{n, host.n_ctx, device_ints, device_ints + n, device_ints + 2 * n, device_tables, host.n_tables,
                     host.window_tables ? device_tables + host.n_tables : nullptr};
  }

  void embed(const WeightMatrix& table, const StepIndex& step, float* out) override { cuda::embed(stream_, table, step.tokens, step.n_tokens, out); }
  void rms_norm(const float* in, int64_t in_stride, const float* weight, float eps, int64_t n, int64_t dim, float* out,
                int64_t out_stride) override {
    cuda::rms_norm(stream_, in, in_stride, weight, eps, n, dim, out, out_stride);
  }
  void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) override { matmul_strided(w, x, w.n_cols, n, y, w.n_rows); }
  void matmul_batched(const WeightMatrix* w, int64_t n_mats, const float* x, int64_t x_token_stride, int64_t x_mat_stride, int64_t n,
                      float* y, int64_t y_token_stride, int64_t y_mat_stride) override {
    for (int64_t m = 0; m < n_mats; ++m) matmul_strided(w[m], x + m * x_mat_stride, x_token_stride, n, y + m * y_mat_stride, y_token_stride);
  }
  void add_bias(float* y, const float* bias, int64_t n, int64_t dim) override { cuda::add_bias(stream_, y, bias, n, dim); }
  void rope_kv_write(const RopeParams& rope, const StepIndex& step, const HeadRows& q, const HeadRows& k, const KvLayerView& kv,
                     const float* k_rows, const float* v_rows) override {
    const RopeFactors factors = rope_factors(rope, step.n_ctx);
    cuda::rope(stream_, factors, rope.n_rot, rope.layout, rope.freq_factors, step.positions, step.n_tokens, q);
    cuda::rope(stream_, factors, rope.n_rot, rope.layout, rope.freq_factors, step.positions, step.n_tokens, k);
    cuda::kv_write(stream_, kv, step, k_rows, v_rows);
  }
  void copy_heads(const HeadRows& dst, const HeadRows& src, int64_t n) override { cuda::copy_heads(stream_, dst, src, n); }
  void paged_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const float* q, float* out) override {
    attend(kv, shape, step, cuda::ChosenPositions{}, q, out);
  }
  bool has_sparse_attention() const override { return true; }
  void layer_norm(const float* in, const float* weight, const float* bias, float eps, int64_t n, int64_t dim, float* out) override {
    cuda::layer_norm(stream_, in, weight, bias, eps, n, dim, out);
  }
  void indexer_select(const KvLayerView& keys, const StepIndex& step, const float* q, int64_t n_heads, const float* weights, float weight_scale,
                      int64_t top_k, int32_t* selected, int32_t* n_selected) override {
    float* scores = grown_f32(indexer_scores_, cuda::indexer_scores_floats(step, top_k));
    cuda::indexer_select(stream_, keys, step, q, n_heads, weights, weight_scale, top_k, scores, selected, n_selected);
  }
  void sparse_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const float* q, const int32_t* selected,
                        const int32_t* n_selected, int64_t top_k, float* out) override {
    attend(kv, shape, step, cuda::ChosenPositions{selected, n_selected, top_k}, q, out);
  }
  bool has_compressed_attention() const override { return true; }
  void rope_rows(const RopeParams& rope, const int32_t* positions, int64_t n_ctx, const HeadRows& rows, int64_t n) override {
    cuda::rope(stream_, rope_factors(rope, n_ctx), rope.n_rot, rope.layout, rope.freq_factors, positions, n, rows);
  }
  void swiglu(float* gate, float* up, int64_t n, float limit) override { cuda::swiglu(stream_, gate, up, n, limit); }
  void hyper_connection_pre(const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n, float* sublayer_in,
                            float* post, float* mix) override {
    cuda::hyper_connection_pre(stream_, p, streams, mix_logits, n, sublayer_in, post, mix);
  }
  void hyper_connection_post(const HyperConnectionParams& p, float* streams, const float* block_out, const float* post, const float* mix,
                             int64_t n) override {
    cuda::hyper_connection_post(stream_, p, streams, block_out, post, mix, n);
  }
  void hyper_connection_head(const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n, float* out) override {
    cuda::hyper_connection_head(stream_, p, streams, mix_logits, n, out);
  }
  void kv_compress(const KvCompressorParams& c, const StepIndex& step, int64_t page_tokens, const float* kv, const float* score,
                   const KvLayerView& state, const KvLayerView& rows) override {
    uint8_t* scratch = grown(compressor_scratch_, cuda::kv_compress_scratch_bytes(c, step, state.dtype));
    cuda::kv_compress(stream_, c, step, page_tokens, kv, score, state, rows, scratch);
  }
  void compressed_attention(const CompressedAttentionParams& a, const StepIndex& step, int64_t page_tokens, const float* q,
                            const KvLayerView& window, const KvLayerView& rows, const int32_t* selected, const int32_t* n_selected,
                            float* out) override {
    float* scratch = grown_f32(attention_scratch_, cuda::compressed_attention_scratch_floats(a, step, selected != nullptr));
    cuda::compressed_attention(stream_, a, step, page_tokens, q, window, rows, selected, n_selected, scratch, out);
  }
  void silu_mul(float* gate, const float* up, int64_t n) override { cuda::silu_mul(stream_, gate, up, n); }
  void add(float* y, const float* x, int64_t n) override { cuda::add(stream_, y, x, n); }
  void gather_rows(const float* src, int64_t dim, const int32_t* rows, int64_t n, float* dst) override {
    for (int64_t i = 0; i < n; ++i) {
      DS_CUDA_CHECK(cudaMemcpyAsync(dst + i * dim, src + int64_t(rows[i]) * dim, size_t(dim) * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    }
  }
  void moe_experts(const ExpertRouting& routing, const float* router_logits, const float* bias, const ExpertWeights& experts,
                   const float* in, int64_t n, float* out, int64_t* expert_tokens) override;

 protected:
  void release(void* data, size_t) override { cudaFree(data); }

 private:
  // A scratch buffer grown to at least `bytes` (the old one freed: cudaFree waits for the work that uses it).
  uint8_t* grown(DeviceBuffer& buffer, size_t bytes) {
    if (buffer.bytes() < bytes) {
      buffer = DeviceBuffer();
      auto more = allocate(std::max(bytes, size_t(1) << 20));
      DS_CHECK(more.ok(), more.message());
      buffer = more.take();
    }
    return buffer.data();
  }
  float* grown_f32(DeviceBuffer& buffer, int64_t n) { return reinterpret_cast<float*>(grown(buffer, size_t(n) * sizeof(float))); }

  void attend(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const cuda::ChosenPositions& chosen, const float* q,
              float* out) {
    float* scratch = grown_f32(attention_scratch_, cuda::paged_attention_scratch_floats(shape, step, chosen));
    cuda::paged_attention(stream_, kv, shape, step, chosen, q, scratch, out);
  }

  // y rows (stride y_stride) = x rows (stride x_stride) · wᵀ.
  void matmul_strided(const WeightMatrix& w, const float* x, int64_t x_stride, int64_t n, float* y, int64_t y_stride) {
    const float one = 1.0f, zero = 0.0f;
    const int rows = int(w.n_rows), cols = int(w.n_cols);
    if (w.type == DType::f32) {
      DS_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, rows, int(n), cols, &one, reinterpret_cast<const float*>(w.data), cols, x,
                                  int(x_stride), &zero, y, int(y_stride)));
      return;
    }
    if (w.type == DType::f16 || w.type == DType::bf16) {
      void* x16 = grown(half_scratch_, size_t(n * w.n_cols) * 2);
      cuda::to_half_type(stream_, w.type, x, x_stride, n, w.n_cols, x16);
      const cudaDataType type = w.type == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
      DS_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, rows, int(n), cols, &one, w.data, type, cols, x16, type, cols, &zero, y,
                                   CUDA_R_32F, int(y_stride), CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
      return;
    }
    float* xa = grown_f32(activation_scratch_, n * w.n_cols);
    cuda::round_activations(stream_, activation_type_for(w.type), x, x_stride, n, w.n_cols, xa);
    if (n <= k_matvec_tokens) return cuda::matvec(stream_, w, xa, n, y, y_stride);
    const int64_t chunk = std::max<int64_t>(1, int64_t(k_dequantized_bytes / (sizeof(float) * size_t(w.n_cols))));
    float* dequantized = grown_f32(dequantized_scratch_, std::min(chunk, w.n_rows) * w.n_cols);
    for (int64_t r0 = 0; r0 < w.n_rows; r0 += chunk) {
      const int64_t nr = std::min(chunk, w.n_rows - r0);
      cuda::dequantize_rows(stream_, w, r0, nr, dequantized);
      DS_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, int(nr), int(n), cols, &one, dequantized, cols, xa, cols, &zero, y + r0,
                                  int(y_stride)));
    }
  }

  int device_;
  std::string name_;
  ThreadPool host_pool_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<uint8_t> staging_;
  DeviceBuffer step_memory_, half_scratch_, activation_scratch_, dequantized_scratch_, attention_scratch_, indexer_scores_, compressor_scratch_;
  DeviceBuffer expert_index_, expert_in_, expert_gate_, expert_up_, expert_out_, slots_;
};

void CudaBackend::moe_experts(const ExpertRouting& routing, const float* router_logits, const float* bias, const ExpertWeights& experts,
                              const float* in, int64_t n, float* out, int64_t* expert_tokens) {
  const int64_t k = routing.n_expert_used, n_embd = experts.gate[0].n_cols, ff = experts.gate[0].n_rows;
  std::vector<float> logits(size_t(n * routing.n_expert)), bias_host;
  download(logits.data(), router_logits, logits.size() * sizeof(float));
  if (bias) {
    bias_host.resize(size_t(routing.n_expert));
    download(bias_host.data(), bias, bias_host.size() * sizeof(float));
  }
  std::vector<int32_t> forced;  // DeepSeek-V4's hash-routed layers: each token's experts given
  if (routing.forced_experts) {
    forced.resize(size_t(n * k));
    download(forced.data(), routing.forced_experts, forced.size() * sizeof(int32_t));
  }
  std::vector<int32_t> chosen(size_t(n * k));
  std::vector<float> weight(size_t(n * k));
  for (int64_t t = 0; t < n; ++t) {
    moe_route(routing, logits.data() + t * routing.n_expert, bias ? bias_host.data() : nullptr, forced.empty() ? nullptr : forced.data() + t * k,
              chosen.data() + t * k, weight.data() + t * k);
  }
  // (token, slot) pairs by expert, in token order, with their weights.
  std::vector<std::vector<int64_t>> assigned(size_t(routing.n_expert));
  for (int64_t i = 0; i < n * k; ++i) assigned[size_t(chosen[size_t(i)])].push_back(i);
  std::vector<int64_t> pairs;
  std::vector<float> pair_weights;
  for (const auto& list : assigned) {
    for (int64_t pair : list) {
      pairs.push_back(pair);
      pair_weights.push_back(weight[size_t(pair)]);
    }
  }
  const size_t weights_at = pairs.size() * sizeof(int64_t);
  uint8_t* index = grown(expert_index_, weights_at + pair_weights.size() * sizeof(float));
  DS_CUDA_CHECK(cudaMemcpyAsync(index, pairs.data(), weights_at, cudaMemcpyHostToDevice, stream_));
  DS_CUDA_CHECK(cudaMemcpyAsync(index + weights_at, pair_weights.data(), pair_weights.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  const auto* pairs_dev = reinterpret_cast<const int64_t*>(index);
  const auto* weights_dev = reinterpret_cast<const float*>(index + weights_at);
  float* slots = grown_f32(slots_, n * k * n_embd);
  float* rows_in = grown_f32(expert_in_, n * k * n_embd);
  float* gate = grown_f32(expert_gate_, n * k * ff);
  float* up = grown_f32(expert_up_, n * k * ff);
  float* rows_out = grown_f32(expert_out_, n * k * n_embd);
  // A slot on an expert another rank holds (expert parallel) adds nothing here.
  DS_CUDA_CHECK(cudaMemsetAsync(slots, 0, size_t(n * k * n_embd) * sizeof(float), stream_));
  int64_t at = 0;
  for (int64_t e = 0; e < routing.n_expert; ++e) {
    const int64_t m = int64_t(assigned[size_t(e)].size());
    expert_tokens[e] += m;
    if (m == 0) continue;
    if (!experts.gate[e].data) {
      at += m;
      continue;
    }
    cuda::gather_pair_rows(stream_, in, pairs_dev + at, k, m, n_embd, rows_in);
    matmul_strided(experts.gate[e], rows_in, n_embd, m, gate, ff);
    matmul_strided(experts.up[e], rows_in, n_embd, m, up, ff);
    cuda::swiglu(stream_, gate, up, m * ff, routing.swiglu_limit);  // limit 0: silu(gate) * up
    matmul_strided(experts.down[e], gate, ff, m, rows_out, n_embd);
    cuda::scatter_weighted(stream_, rows_out, pairs_dev + at, weights_dev + at, m, n_embd, slots);
    at += m;
  }
  cuda::sum_slots(stream_, slots, n, k, n_embd, out);
  // The host vectors the copies read go out of scope here.
  DS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace
}  // namespace ds

// The plugin's entry point (device/backend_plugin.cpp): a backend on device
// `device`, or null with the reason in `error`.
extern "C" ds::Backend* dsinfer_cuda_backend(int device, int n_host_threads, char* error, size_t error_size) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  std::string why;
  if (status != cudaSuccess) why = std::string("no GPU: ") + cudaGetErrorString(status);
  else if (count == 0) why = "no GPU: the driver reports no CUDA device";
  else if (device < 0 || device >= count) why = "no CUDA device " + std::to_string(device) + " (this machine has " + std::to_string(count) + ")";
  if (!why.empty()) {
    std::snprintf(error, error_size, "%s", why.c_str());
    return nullptr;
  }
  cudaDeviceProp props{};
  cudaGetDeviceProperties(&props, device);
  const std::string name = "cuda:" + std::to_string(device) + " (" + props.name + ", " + std::to_string(props.totalGlobalMem >> 30) + " GiB)";
  return new ds::CudaBackend(device, n_host_threads, name);
}
