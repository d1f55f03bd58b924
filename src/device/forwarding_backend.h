#pragma once
// A backend that passes every call to another one: the base of decorators
// that watch a model's ops without changing them (quant/calibration.h records
// the inputs of every matrix multiply). Memory stays the inner backend's: the
// buffers it allocates are released by it.

#include <memory>

#include "base/status.h"
#include "device/backend.h"

namespace ds {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  MemoryInfo memory_info() const override { return inner_->memory_info(); }
  Result<DeviceBuffer> allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void upload(void* dst, const void* src, size_t bytes) override { inner_->upload(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { inner_->download(dst, src, bytes); }
  bool reads_host_memory() const override { return inner_->reads_host_memory(); }
  bool supports(DType type) const override { return inner_->supports(type); }
  bool repacks(DType type, int64_t n_rows, int64_t n_cols) const override { return inner_->repacks(type, n_rows, n_cols); }
  void store_matrix(DType type, int64_t n_rows, int64_t n_cols, const uint8_t* host_rows, uint8_t* dst, bool repack) override {
    inner_->store_matrix(type, n_rows, n_cols, host_rows, dst, repack);
  }
  ThreadPool& host_pool() override { return inner_->host_pool(); }
  NativeQueue native_queue() override { return inner_->native_queue(); }
  StepIndex upload_step(const StepIndex& host) override { return inner_->upload_step(host); }
  void embed(const WeightMatrix& table, const StepIndex& step, float* out) override { inner_->embed(table, step, out); }
  void rms_norm(const float* in, int64_t in_stride, const float* weight, float eps, int64_t n, int64_t dim, float* out,
                int64_t out_stride) override {
    inner_->rms_norm(in, in_stride, weight, eps, n, dim, out, out_stride);
  }
  void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y) override { inner_->matmul(w, x, n, y); }
  void matmul_batched(const WeightMatrix* w, int64_t n_mats, const float* x, int64_t x_token_stride, int64_t x_mat_stride,
                      int64_t n, float* y, int64_t y_token_stride, int64_t y_mat_stride) override {
    inner_->matmul_batched(w, n_mats, x, x_token_stride, x_mat_stride, n, y, y_token_stride, y_mat_stride);
  }
  void add_bias(float* y, const float* bias, int64_t n, int64_t dim) override { inner_->add_bias(y, bias, n, dim); }
  void rope_kv_write(const RopeParams& rope, const StepIndex& step, const HeadRows& q, const HeadRows& k, const KvLayerView& kv,
                     const float* k_rows, const float* v_rows) override {
    inner_->rope_kv_write(rope, step, q, k, kv, k_rows, v_rows);
  }
  void copy_heads(const HeadRows& dst, const HeadRows& src, int64_t n) override { inner_->copy_heads(dst, src, n); }
  void paged_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const float* q,
                       float* out) override {
    inner_->paged_attention(kv, shape, step, q, out);
  }
  bool expands_mla() const override { return inner_->expands_mla(); }
  void mla_expanded_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, int64_t t0, int64_t n,
                              const float* q, int64_t q_stride, const WeightMatrix* k_up, const WeightMatrix* v_up, float* out,
                              int64_t out_stride) override {
    inner_->mla_expanded_attention(kv, shape, step, t0, n, q, q_stride, k_up, v_up, out, out_stride);
  }
  bool has_sparse_attention() const override { return inner_->has_sparse_attention(); }
  void layer_norm(const float* in, const float* weight, const float* bias, float eps, int64_t n, int64_t dim, float* out) override {
    inner_->layer_norm(in, weight, bias, eps, n, dim, out);
  }
  void indexer_select(const KvLayerView& keys, const StepIndex& step, const float* q, int64_t n_heads, const float* weights, float weight_scale,
                      int64_t top_k, int32_t* selected, int32_t* n_selected) override {
    inner_->indexer_select(keys, step, q, n_heads, weights, weight_scale, top_k, selected, n_selected);
  }
  void sparse_attention(const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const float* q,
                        const int32_t* selected, const int32_t* n_selected, int64_t top_k, float* out) override {
    inner_->sparse_attention(kv, shape, step, q, selected, n_selected, top_k, out);
  }
  bool has_compressed_attention() const override { return inner_->has_compressed_attention(); }
  void rope_rows(const RopeParams& rope, const int32_t* positions, int64_t n_ctx, const HeadRows& rows, int64_t n) override {
    inner_->rope_rows(rope, positions, n_ctx, rows, n);
  }
  void swiglu(float* gate, float* up, int64_t n, float limit) override { inner_->swiglu(gate, up, n, limit); }
  void hyper_connection_pre(const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n, float* sublayer_in,
                            float* post, float* mix) override {
    inner_->hyper_connection_pre(p, streams, mix_logits, n, sublayer_in, post, mix);
  }
  void hyper_connection_post(const HyperConnectionParams& p, float* streams, const float* block_out, const float* post, const float* mix,
                             int64_t n) override {
    inner_->hyper_connection_post(p, streams, block_out, post, mix, n);
  }
  void hyper_connection_head(const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n, float* out) override {
    inner_->hyper_connection_head(p, streams, mix_logits, n, out);
  }
  void kv_compress(const KvCompressorParams& c, const StepIndex& step, int64_t page_tokens, const float* kv, const float* score,
                   const KvLayerView& state, const KvLayerView& rows) override {
    inner_->kv_compress(c, step, page_tokens, kv, score, state, rows);
  }
  void compressed_attention(const CompressedAttentionParams& a, const StepIndex& step, int64_t page_tokens, const float* q,
                            const KvLayerView& window, const KvLayerView& rows, const int32_t* selected, const int32_t* n_selected,
                            float* out) override {
    inner_->compressed_attention(a, step, page_tokens, q, window, rows, selected, n_selected, out);
  }
  void silu_mul(float* gate, const float* up, int64_t n) override { inner_->silu_mul(gate, up, n); }
  void add(float* y, const float* x, int64_t n) override { inner_->add(y, x, n); }
  void gather_rows(const float* src, int64_t dim, const int32_t* rows, int64_t n, float* dst) override {
    inner_->gather_rows(src, dim, rows, n, dst);
  }
  void moe_experts(const ExpertRouting& routing, const float* router_logits, const float* bias, const ExpertWeights& experts,
                   const float* in, int64_t n, float* out, int64_t* expert_tokens) override {
    inner_->moe_experts(routing, router_logits, bias, experts, in, n, out, expert_tokens);
  }

 protected:
  Backend& inner() { return *inner_; }
  // Buffers come from inner_->allocate and go back to it, never here.
  void release(void*, size_t) override { DS_CHECK(false, "a forwarding backend owns no memory"); }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace ds
