#pragma once
// The CUDA backend's kernel launches (cuda_ops.cu, cuda_matmul.cu), each on
// the given stream; cuda_backend.cu composes them into the Backend's ops.

#include <cuda_runtime.h>

#include <cstdint>

#include "device/backend.h"

namespace ds::cuda {

// out row t = row tokens[t] of table (the GGUF layout), as f32.
void embed(cudaStream_t s, const WeightMatrix& table, const int32_t* tokens, int64_t n, float* out);
void rms_norm(cudaStream_t s, const float* in, int64_t in_stride, const float* weight, float eps, int64_t n, int64_t dim, float* out,
              int64_t out_stride);
void add(cudaStream_t s, float* y, const float* x, int64_t n);
void add_bias(cudaStream_t s, float* y, const float* bias, int64_t n, int64_t dim);
void silu_mul(cudaStream_t s, float* gate, const float* up, int64_t n);
// kernels/elementwise.h's swiglu (DeepSeek-V4's clamp at limit > 0).
void swiglu(cudaStream_t s, float* gate, float* up, int64_t n, float limit);
void copy_heads(cudaStream_t s, const HeadRows& dst, const HeadRows& src, int64_t n);
void rope(cudaStream_t s, const RopeFactors& f, int n_rot, RopeLayout layout, const float* freq_factors, const int32_t* positions, int64_t n,
          const HeadRows& x);
void kv_write(cudaStream_t s, const KvLayerView& kv, const StepIndex& step, const float* k_rows, const float* v_rows);
// The positions a sparse attention attends to: token t's counts[t] of them at positions + t * per_token
// (device memory, ascending); positions null: every position of the token's context.
struct ChosenPositions {
  const int32_t* positions = nullptr;
  const int32_t* counts = nullptr;
  int64_t per_token = 0;
};

// Online-softmax attention over the token's pages, each (token, head)'s positions split across blocks whose
// partial sums `scratch` holds (paged_attention_scratch_floats of them) before they are combined into out.
int64_t paged_attention_scratch_floats(const AttentionShape& shape, const StepIndex& step, const ChosenPositions& chosen);
void paged_attention(cudaStream_t s, const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const ChosenPositions& chosen,
                     const float* q, float* scratch, float* out);
// DeepSeek-V4's attention (kernels/compressed_attention.h) through the same kernel: the window's raw rows and
// the compressed rows, each head's sink in its softmax.
int64_t compressed_attention_scratch_floats(const CompressedAttentionParams& a, const StepIndex& step, bool selected);
void compressed_attention(cudaStream_t s, const CompressedAttentionParams& a, const StepIndex& step, int64_t page_tokens, const float* q,
                          const KvLayerView& window, const KvLayerView& rows, const int32_t* selected, const int32_t* n_selected,
                          float* scratch, float* out);
// kernels/elementwise.h's layer_norm: mean and squares summed in f64 as there; out may be in.
void layer_norm(cudaStream_t s, const float* in, const float* weight, const float* bias, float eps, int64_t n, int64_t dim, float* out);
// kernels/sparse_attention.h's indexer_select (cuda_indexer.cu): each token's scores of its positions into
// `scores` (indexer_scores_floats of them), then its top_k, ties to the lower position, ascending.
int64_t indexer_scores_floats(const StepIndex& step, int64_t top_k);
void indexer_select(cudaStream_t s, const KvLayerView& keys, const StepIndex& step, const float* q, int64_t n_heads, const float* weights,
                    float weight_scale, int64_t top_k, float* scores, int32_t* selected, int32_t* n_selected);

// DeepSeek-V4's hyper-connections (cuda_deepseek4.cu; kernels/hyper_connection.h).
void hyper_connection_pre(cudaStream_t s, const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                          float* sublayer_in, float* post, float* mix);
void hyper_connection_post(cudaStream_t s, const HyperConnectionParams& p, float* streams, const float* block_out, const float* post,
                           const float* mix, int64_t n);
void hyper_connection_head(cudaStream_t s, const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                           float* out);
// DeepSeek-V4's compressors (cuda_deepseek4.cu; kernels/kv_compressor.h): the step's state rows stored and
// rounded into `stored` and `rounded` (kv_compress_scratch_bytes of them) before the rows form.
size_t kv_compress_scratch_bytes(const KvCompressorParams& c, const StepIndex& step, DType state_type);
void kv_compress(cudaStream_t s, const KvCompressorParams& c, const StepIndex& step, int64_t page_tokens, const float* kv, const float* score,
                 const KvLayerView& state, const KvLayerView& rows, uint8_t* scratch);

// x rows (stride x_stride) rounded to `act_type` and back to f32: out [n, n_cols].
void round_activations(cudaStream_t s, DType act_type, const float* x, int64_t x_stride, int64_t n, int64_t n_cols, float* out);
// x rows to f16 or bf16 for cuBLAS: out [n, n_cols].
void to_half_type(cudaStream_t s, DType type, const float* x, int64_t x_stride, int64_t n, int64_t n_cols, void* out);
// y[t * y_stride + r] = sum_j w_r[j] * xa[t * n_cols + j] in f32, n <= 8 tokens, quantized w: one warp per row.
void matvec(cudaStream_t s, const WeightMatrix& w, const float* xa, int64_t n, float* y, int64_t y_stride);
// Rows [first, first + n_rows) of w as f32 into out [n_rows, n_cols].
void dequantize_rows(cudaStream_t s, const WeightMatrix& w, int64_t first, int64_t n_rows, float* out);

// MoE: rows[i] = in row pairs[i] / k; slots[pairs[i]] = out row i * weight[i]; out row t = sum of its k slots in order.
void gather_pair_rows(cudaStream_t s, const float* in, const int64_t* pairs, int64_t k, int64_t n, int64_t dim, float* rows);
void scatter_weighted(cudaStream_t s, const float* rows, const int64_t* pairs, const float* weights, int64_t n, int64_t dim, float* slots);
void sum_slots(cudaStream_t s, const float* slots, int64_t n, int64_t k, int64_t dim, float* out);

}  // namespace ds::cuda
