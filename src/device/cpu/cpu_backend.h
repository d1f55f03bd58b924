#pragma once
// The CPU backend: today's kernels (kernels/) on a thread pool, the ISA chosen
// once at start-up (kernels/cpu_features.h), Q8_0/Q4_0/MXFP4/Q4_K/Q5_K/Q6_K/I8
// matrices (BF16 ones where AMX-BF16 runs) repacked into the interleaved
// layout where this CPU has kernels for it, and memory
// in anonymous mappings backed by transparent huge pages. Device memory is
// host memory: upload and download are copies, and the file mapping serves
// as weight memory in place.

#include <memory>
#include <vector>

#include "device/backend.h"
#include "kernels/flash_attention.h"
#include "kernels/matmul.h"
#include "kernels/sparse_attention.h"

namespace ds {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads);
  ~CpuBackend() override;

  std::string name() const override;
  MemoryInfo memory_info() const override;
  Result<DeviceBuffer> allocate(size_t bytes) override;
  void upload(void* device_dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* device_src, size_t bytes) override;
  bool reads_host_memory() const override { return true; }
  bool supports(DType type) const override { return is_compute_supported(type); }
  bool repacks(DType type, int64_t n_rows, int64_t n_cols) const override;
  void store_matrix(DType type, int64_t n_rows, int64_t n_cols, const uint8_t* host_rows, uint8_t* device_dst, bool repack) override;
  ThreadPool& host_pool() override { return pool_; }
  StepIndex upload_step(const StepIndex& host) override { return host; }

  void embed(const WeightMatrix& table, const StepIndex& step, float* out) override;
  void rms_norm(const float* in, int64_t in_stride, const float* weight, float eps, int64_t n, int64_t dim, float* out,
                int64_t out_stride) override;
  void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) override;
  void matmul_batched(const WeightMatrix* w, int64_t n_mats, const float* x, int64_t x_token_stride, int64_t x_mat_stride, int64_t n,
                      float* y, int64_t y_token_stride, int64_t y_mat_stride) override;
  void add_bias(float* y, const float* bias, int64_t n, int64_t dim) override;
  void rope_kv_write(const RopeParams& rope, const StepIndex& step, const HeadRows& q, const HeadRows& k, const KvLayerView& kv,
                     const float* k_rows, const float* v_rows) override;
  void copy_heads(const HeadRows& dst, const HeadRows& src, int64_t n) override;
  void paged_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const float* q,
                       float* out) override;
  bool expands_mla() const override { return true; }
  bool has_sparse_attention() const override { return true; }
  void layer_norm(const float* in, const float* weight, const float* bias, float eps, int64_t n, int64_t dim, float* out) override;
  void indexer_select(const KvLayerView& keys, const StepIndex& step, const float* q, int64_t n_heads, const float* weights, float weight_scale,
                      int64_t top_k, int32_t* selected, int32_t* n_selected) override;
  void sparse_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const float* q,
                        const int32_t* selected, const int32_t* n_selected, int64_t top_k, float* out) override;
  void mla_expanded_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, int64_t t0, int64_t n,
                              const float* q, int64_t q_stride, const WeightMatrix* k_up, const WeightMatrix* v_up, float* out,
                              int64_t out_stride) override;
  bool has_compressed_attention() const override { return true; }
  void rope_rows(const RopeParams& rope, const int32_t* positions, int64_t n_ctx, const HeadRows& rows, int64_t n) override;
  void swiglu(float* gate, float* up, int64_t n, float limit) override;
  void hyper_connection_pre(const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n, float* sublayer_in,
                            float* post, float* mix) override;
  void hyper_connection_post(const HyperConnectionParams& p, float* streams, const float* block_out, const float* post, const float* mix,
                             int64_t n) override;
  void hyper_connection_head(const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n, float* out) override;
  void kv_compress(const KvCompressorParams& c, const StepIndex& step, int64_t page_tokens, const float* kv, const float* score,
                   const KvLayerView& state, const KvLayerView& rows) override;
  void compressed_attention(const CompressedAttentionParams& a, const StepIndex& step, int64_t page_tokens, const float* q,
                            const KvLayerView& window, const KvLayerView& rows, const int32_t* selected, const int32_t* n_selected,
                            float* out) override;
  void silu_mul(float* gate, const float* up, int64_t n) override;
  void add(float* y, const float* x, int64_t n) override;
  void gather_rows(const float* src, int64_t dim, const int32_t* rows, int64_t n, float* dst) override;
  void moe_experts(const ExpertRouting& routing, const float* router_logits, const float* bias, const ExpertWeights& experts,
                   const float* in, int64_t n, float* out, int64_t* expert_tokens) override;

 protected:
  void release(void* data, size_t bytes) override;

 private:
  // One per pool thread: a pool of its own thread alone and buffers, so that
  // each thread can run whole experts (cpu_experts.cpp).
  struct ExpertWorker {
    ThreadPool serial{1};
    MatmulScratch scratch;
    std::vector<float> in, gate, up, out;  // the expert's tokens, gathered, its hidden rows and outputs
  };
  void run_expert(const ExpertWeights& experts, int64_t e, const std::vector<int64_t>& pairs, int64_t k, float swiglu_limit, const float* in,
                  ThreadPool& pool, ExpertWorker& worker);

  ThreadPool pool_;
  MatmulScratch matmul_scratch_;
  AttentionScratch attention_scratch_;
  SparseAttentionScratch sparse_scratch_;
  // The expanded MLA form's block of cached rows, its keys and values, and the running softmax (cpu_expanded_mla.cpp).
  std::vector<float> mla_latent_, mla_keys_, mla_values_;
  FlashAttentionState flash_state_;
  FlashAttentionScratch flash_scratch_;
  std::vector<std::unique_ptr<ExpertWorker>> expert_workers_;
  std::vector<int32_t> routed_expert_;  // [n, n_expert_used]
  std::vector<float> routed_weight_;    // [n, n_expert_used]
  std::vector<float> slot_out_;         // [n, n_expert_used, n_embd]
};

}  // namespace ds
