#pragma once
// The seam between the model and the hardware it runs on, as ggml_backend is
// llama.cpp's: memory and its placement, copies between host and device, the
// memory info admission reads, and the ops the decoders compose. The model
// names ops, never an ISA or a device type; each backend lives in its own
// folder (src/device/cpu/, later cuda/ and ascend/) and is checked op by op
// against the reference by tests/device/backend_ops.cpp.
//
// Every pointer an op takes is an address in this backend's memory: a
// DeviceBuffer's, a weight's, a KV page's. Host memory crosses only through
// upload/download and the step's index (upload_step); download returns once
// the ops issued before it have finished. Only the engine thread issues ops.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "tensor/deepseek4_params.h"
#include "tensor/expert_routing.h"
#include "tensor/kv_layer_view.h"
#include "tensor/rope_params.h"
#include "tensor/weight_matrix.h"

namespace ds {

class Backend;

// The ops a model's forward may call, by name: what `dsinfer info --ops`
// lists, and what loading a model checks its backend for.
enum class BackendOp {
  embed, rms_norm, matmul, matmul_batched, add_bias, rope_kv_write, copy_heads, paged_attention, mla_expanded_attention,
  silu_mul, add, gather_rows, moe_experts, layer_norm, indexer_select, sparse_attention,
  rope_rows, swiglu, hyper_connection, kv_compress, compressed_attention,
};
const char* backend_op_name(BackendOp op);

// Memory the backend allocated; freed with the buffer. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* owner, void* data, size_t bytes) : owner_(owner), data_(static_cast<uint8_t*>(data)), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  uint8_t* data() const { return data_; }
  float* f32() const { return reinterpret_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  Backend* owner_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

struct MemoryInfo {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;  // what new allocations may still take
  double bandwidth_bytes_per_s = 0.0;  // the memory's peak from the device's own figures; 0: unknown, measure it
};

// The step's tokens and where they go: token t is tokens[t] at positions[t]
// of sequence seq_of_token[t], whose pages are tables[seq_of_token[t]] and
// whose window pages (KvStream::windowed) are window_tables[seq_of_token[t]]
// (null where no op of the backend reads windowed streams).
struct StepIndex {
  int64_t n_tokens = 0;
  int64_t n_ctx = 0;  // the longest context of the step (the largest position + 1)
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* seq_of_token = nullptr;
  const BlockTableView* tables = nullptr;
  int64_t n_tables = 0;
  const BlockTableView* window_tables = nullptr;

  // This step with the window tables as its tables, for an op that reads
  // only windowed streams through them.
  StepIndex windowed() const {
    StepIndex step = *this;
    step.tables = window_tables;
    return step;
  }
};

// Heads of f32 rows: element i of head h of token t at data[t * token_stride + h * head_stride + i].
struct HeadRows {
  float* data = nullptr;
  int64_t n_heads = 0, head_dim = 0;
  int64_t token_stride = 0, head_stride = 0;
};

// The routed experts of one MoE layer: n_expert matrices each. Under expert
// parallel an expert another rank holds has no data here: the tokens routed
// to it add nothing on this rank (the ranks' outputs are summed).
struct ExpertWeights {
  const WeightMatrix* gate = nullptr;
  const WeightMatrix* up = nullptr;
  const WeightMatrix* down = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu (avx2, 2 threads)": for logs and bench headers.
  virtual std::string name() const = 0;
  virtual MemoryInfo memory_info() const = 0;

  // Memory and copies.
  virtual Result<DeviceBuffer> allocate(size_t bytes) = 0;
  virtual void upload(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* device_src, size_t bytes) = 0;

  // Weights. Whether matrices may be read in place from host memory (the file
  // mapping); which weight types it runs; whether n_rows rows of n_cols of a
  // type are stored in the backend's own layout (a repacked tensor takes the
  // same bytes, and its row r starts at the same offset whenever
  // repacks(type, r, n_cols), so slices of it stay slices);
  // and storing a tensor: host rows in the GGUF layout to `device_dst`. May be
  // called from several threads at once.
  virtual bool reads_host_memory() const = 0;
  virtual bool supports(DType type) const = 0;  // weight types this backend multiplies
  virtual bool repacks(DType type, int64_t n_rows, int64_t n_cols) const = 0;
  virtual void store_matrix(DType type, int64_t n_rows, int64_t n_cols, const uint8_t* host_rows, uint8_t* device_dst,
                            bool repack) = 0;

  // Host threads the engine may use between steps (grammar masks).
  virtual ThreadPool& host_pool() = 0;

  // The device queue this backend issues its ops on, for a library that
  // issues work in order beside them (NCCL's collectives under tensor
  // parallel: parallel/device_ranks.h): api "cuda", the device number and its
  // cudaStream_t. Empty (api null) for a backend whose memory is the host's.
  struct NativeQueue {
    const char* api = nullptr;
    int device = -1;
    void* stream = nullptr;
  };
  virtual NativeQueue native_queue() { return {}; }

  // The step's index in the backend's memory, valid until the next call.
  virtual StepIndex upload_step(const StepIndex& host) = 0;

  // Ops (f32 activations, rows contiguous unless strides say otherwise).
  // out[t] = row step.tokens[t] of table, as f32.
  virtual void embed(const WeightMatrix& table, const StepIndex& step, float* out) = 0;
  // out row t = in row t / rms(in row t) * weight, n rows of dim (strides in elements).
  virtual void rms_norm(const float* in, int64_t in_stride, const float* weight, float eps, int64_t n, int64_t dim, float* out,
                        int64_t out_stride) = 0;
  // y = x · wᵀ: x [n, w.n_cols], y [n, w.n_rows].
  virtual void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) = 0;
  // kernels/matmul.h's matmul_batched: per-head matrices against strided rows.
  virtual void matmul_batched(const WeightMatrix* w, int64_t n_mats, const float* x, int64_t x_token_stride, int64_t x_mat_stride,
                              int64_t n, float* y, int64_t y_token_stride, int64_t y_mat_stride) = 0;
  // y[t][i] += bias[i], n rows of dim.
  virtual void add_bias(float* y, const float* bias, int64_t n, int64_t dim) = 0;
  // Rotates q and k in place at the step's positions, then stores each token's
  // k_rows and v_rows ([n, kv.kv_dim], v_rows null for a latent cache) at its slot.
  virtual void rope_kv_write(const RopeParams& rope, const StepIndex& step, const HeadRows& q, const HeadRows& k,
                             const KvLayerView& kv, const float* k_rows, const float* v_rows) = 0;
  // dst (t, h, i) = src (t, h, i) for i < src.head_dim.
  virtual void copy_heads(const HeadRows& dst, const HeadRows& src, int64_t n) = 0;
  // kernels/paged_attention.h's attention over the step's block tables.
  virtual void paged_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const float* q,
                               float* out) = 0;
  // Multi-head latent attention in expanded form for tokens [t0, t0 + n) of
  // the step, consecutive positions of one sequence: a block of cached
  // positions at a time, the latents are up-projected to each head's keys
  // (k_up: per head [nope, kv_lora], beside the cached RoPE key) and values
  // (v_up: per head [v_dim, kv_lora]), and the queries (token t's heads at
  // q + t * q_stride, [nope | rope] each, shape.head_dim wide) attend over
  // them with an online softmax (kernels/flash_attention.h). out + t *
  // out_stride: the token's n_head value rows of shape.v_dim. Only where
  // expands_mla(): elsewhere the model keeps the absorbed form.
  virtual bool expands_mla() const { return false; }
  virtual void mla_expanded_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, int64_t t0,
                                      int64_t n, const float* q, int64_t q_stride, const WeightMatrix* k_up,
                                      const WeightMatrix* v_up, float* out, int64_t out_stride);
  // gate = silu(gate) * up over n elements.
  virtual void silu_mul(float* gate, const float* up, int64_t n) = 0;
  // y += x over n elements.
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // dst row i = src row rows[i] (rows: host indices), n rows of dim.
  virtual void gather_rows(const float* src, int64_t dim, const int32_t* rows, int64_t n, float* dst) = 0;
  // A routed-expert FFN layer: each token's top-k experts by moe_route, then
  // out[t] = sum over its slots, in slot order, of weight * down(silu(gate(in)) * up(in)).
  // bias: the selection bias or null. expert_tokens (host, [n_expert]) += the
  // tokens each expert took.
  virtual void moe_experts(const ExpertRouting& routing, const float* router_logits, const float* bias, const ExpertWeights& experts,
                           const float* in, int64_t n, float* out, int64_t* expert_tokens) = 0;

  // DeepSeek Sparse Attention's ops (DeepSeek-V3.2), only where
  // has_sparse_attention(); a model that needs them is refused at load
  // elsewhere. kernels/elementwise.h's layer_norm over n rows of dim (the
  // indexer's keys), and kernels/sparse_attention.h's indexer_select and
  // sparse_attention over the step's block tables (selected and n_selected
  // in the backend's memory, top_k per token).
  virtual bool has_sparse_attention() const { return false; }
  // Whether this backend runs `op` (every backend runs the ops without a capability query).
  bool implements(BackendOp op) const;
  virtual void layer_norm(const float* in, const float* weight, const float* bias, float eps, int64_t n, int64_t dim, float* out);
  virtual void indexer_select(const KvLayerView& keys, const StepIndex& step, const float* q, int64_t n_heads, const float* weights, float weight_scale,
                              int64_t top_k, int32_t* selected, int32_t* n_selected);
  virtual void sparse_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const float* q,
                                const int32_t* selected, const int32_t* n_selected, int64_t top_k, float* out);

  // DeepSeek-V4's ops, only where has_compressed_attention() (the same
  // refusal elsewhere). rope_rows: rows rotated at positions[t] (in the
  // backend's memory; a negative position turns back), n_ctx as in
  // rope_kv_write. swiglu: kernels/elementwise.h's. The hyper-connections:
  // kernels/hyper_connection.h's (pre, post, and the head's reduction).
  // kv_compress and compressed_attention over the step's block tables:
  // kernels/kv_compressor.h's and kernels/compressed_attention.h's, page_tokens
  // the pool's page size.
  virtual bool has_compressed_attention() const { return false; }
  virtual void rope_rows(const RopeParams& rope, const int32_t* positions, int64_t n_ctx, const HeadRows& rows, int64_t n);
  virtual void swiglu(float* gate, float* up, int64_t n, float limit);
  virtual void hyper_connection_pre(const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                                    float* sublayer_in, float* post, float* mix);
  virtual void hyper_connection_post(const HyperConnectionParams& p, float* streams, const float* block_out, const float* post,
                                     const float* mix, int64_t n);
  virtual void hyper_connection_head(const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n, float* out);
  virtual void kv_compress(const KvCompressorParams& c, const StepIndex& step, int64_t page_tokens, const float* kv, const float* score,
                           const KvLayerView& state, const KvLayerView& rows);
  virtual void compressed_attention(const CompressedAttentionParams& a, const StepIndex& step, int64_t page_tokens, const float* q,
                                    const KvLayerView& window, const KvLayerView& rows, const int32_t* selected,
                                    const int32_t* n_selected, float* out);

 protected:
  friend class DeviceBuffer;
  virtual void release(void* data, size_t bytes) = 0;
};

// The backend for a device as --device names it (device/device.h): "cpu" or
// cpu:CORES (n_threads threads), or "cuda:N" (GPU N, n_threads host threads),
// loaded from libdsinfer_cuda.so beside the
// binary (device/backend_plugin.h) and refused, saying why, where it is absent
// or finds no GPU.
Result<std::unique_ptr<Backend>> create_backend(const std::string& device, int n_threads);

}  // namespace ds
