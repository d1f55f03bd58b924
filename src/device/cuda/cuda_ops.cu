// The CUDA backend's row-wise, element-wise and attention kernels. Each mirrors
// its host reference's order of operations (kernels/, tensor/quantize.cpp).

#include <algorithm>
#include <cfloat>

#include "device/cuda/cuda_common.cuh"
#include "device/cuda/cuda_launch.h"

namespace ds::cuda {
namespace {

constexpr int k_threads = 256;

unsigned blocks_for(int64_t n, int per_block = k_threads) { return unsigned((n + per_block - 1) / per_block); }

__global__ void embed_kernel(int type, const uint8_t* table, int64_t row_bytes, const int32_t* tokens, int64_t n_cols, float* out) {
  const int64_t t = blockIdx.x;
  const uint8_t* row = table + int64_t(tokens[t]) * row_bytes;
  for (int64_t j = threadIdx.x; j < n_cols; j += blockDim.x) out[t * n_cols + j] = element(type, row, j);
}

// Squares in f32, summed in f64 (per thread, then across the block), as the
// reference; without a weight (null) the row is only scaled.
__global__ void rms_norm_kernel(const float* in, int64_t in_stride, const float* weight, float eps, int64_t dim, float* out,
                                int64_t out_stride) {
  __shared__ double partial[k_threads];
  const float* x = in + blockIdx.x * in_stride;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += double(x[i] * x[i]);
  const float scale = 1.0f / sqrtf(float(block_sum(sum, partial) / double(dim)) + eps);
  float* y = out + blockIdx.x * out_stride;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[i] = weight ? x[i] * scale * weight[i] : x[i] * scale;
}

// The mean, then the squares of the differences, each summed in f64 as the reference sums them.
__global__ void layer_norm_kernel(const float* in, const float* weight, const float* bias, float eps, int64_t dim, float* out) {
  __shared__ double partial[k_threads];
  const float* x = in + blockIdx.x * dim;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += double(x[i]);
  const float mean = float(block_sum(sum, partial) / double(dim));
  double squares = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) squares += double((x[i] - mean) * (x[i] - mean));
  const float scale = 1.0f / sqrtf(float(block_sum(squares, partial) / double(dim)) + eps);
  float* y = out + blockIdx.x * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[i] = (x[i] - mean) * scale * weight[i] + bias[i];
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t n, int64_t dim) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n * dim) y[i] += bias[i % dim];
}

// gate = silu(gate) * up; with a limit (> 0, DeepSeek-V4's SwiGLU clamp) the
// gate clamped from above and up to [-limit, limit] first, the clamped up
// written back as kernels/elementwise.h's swiglu does.
__global__ void swiglu_kernel(float* gate, const float* up, float* up_clamped, int64_t n, float limit) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float g = gate[i], u = up[i];
  if (limit > 0.0f) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    up_clamped[i] = u;
  }
  gate[i] = g / (1.0f + expf(-g)) * u;
}

__global__ void copy_heads_kernel(HeadRows dst, HeadRows src, int64_t n) {
  const int64_t item = blockIdx.x;  // (token, head)
  const int64_t t = item / src.n_heads, h = item % src.n_heads;
  const float* from = src.data + t * src.token_stride + h * src.head_stride;
  float* to = dst.data + t * dst.token_stride + h * dst.head_stride;
  for (int64_t i = threadIdx.x; i < src.head_dim; i += blockDim.x) to[i] = from[i];
}

// One thread per rotated pair of one (token, head).
__global__ void rope_kernel(RopeFactors f, int n_rot, bool neox, const float* freq_factors, const int32_t* positions, HeadRows x) {
  const int64_t item = blockIdx.x;  // (token, head)
  const int64_t t = item / x.n_heads, h = item % x.n_heads;
  float* v = x.data + t * x.token_stride + h * x.head_stride;
  for (int i = threadIdx.x; i < n_rot / 2; i += blockDim.x) rotate_pair(f, n_rot, neox, freq_factors, positions[t], i, v);
}

// One block per (token, kv head): the row stored in the cache's type.
__global__ void kv_write_kernel(KvLayerView kv, StepIndex step, const float* k_rows, const float* v_rows) {
  const int64_t t = blockIdx.x / kv.n_kv_heads, h = blockIdx.x % kv.n_kv_heads, dim = kv.kv_dim / kv.n_kv_heads;
  const int64_t bytes = kv_head_bytes(kv);
  const int64_t offset = slot_offset(kv, step.tables[step.seq_of_token[t]], step.positions[t], h, bytes);
  for (int which = 0; which < (kv.v ? 2 : 1); ++which) {
    store_row(kv.dtype, (which ? v_rows : k_rows) + t * kv.kv_dim + h * dim, dim, (which ? kv.v : kv.k) + offset);
  }
}

constexpr int k_attention_threads = 128;
constexpr int k_attention_warps = k_attention_threads / 32;
constexpr int k_max_value_per_thread = 8;  // value_dim <= 1024

// A (token, head)'s positions split across blocks (flash-decoding), so that
// one decoded token's few heads still fill the GPU: each split writes its
// running maximum, its sum of weights and its unnormalised value sums; then
// combine_splits_kernel merges them (one split writes the output itself).
// Splits hold at least k_split_positions.
constexpr int64_t k_split_positions = 256;
constexpr int64_t k_attention_blocks = 1024;  // several waves of an H200's 132 multiprocessors

// Splits for `items` (token, head) pairs of which the longest attends to `longest` rows.
int64_t attention_splits(int64_t items, int64_t longest) {
  const int64_t by_length = (longest + k_split_positions - 1) / k_split_positions;
  const int64_t by_blocks = (k_attention_blocks + items - 1) / items;
  return std::max<int64_t>(1, std::min(by_length, by_blocks));
}

// The rows attention reads, for attention_kernel: count(t) of them for token
// t, row j's key and value for a KV head, and the cache's type.
//
// Paged attention: the token's context in the layer's pages, or the
// positions `chosen` lists for it (DeepSeek-V3.2's sparse attention).
struct PagedRows {
  KvLayerView kv;
  StepIndex step;
  ChosenPositions chosen;
  __device__ DType dtype() const { return kv.dtype; }
  __device__ int64_t count(int64_t t) const { return chosen.positions ? int64_t(chosen.counts[t]) : int64_t(step.positions[t]) + 1; }
  __device__ void row(int64_t t, int64_t kv_head, int64_t j, const uint8_t** key, const uint8_t** value) const {
    const int64_t position = chosen.positions ? int64_t(chosen.positions[t * chosen.per_token + j]) : j;
    const int64_t offset = slot_offset(kv, step.tables[step.seq_of_token[t]], position, kv_head, kv_head_bytes(kv));
    *key = kv.k + offset;
    *value = (kv.v ? kv.v : kv.k) + offset;
  }
};

// DeepSeek-V4's attention (kernels/compressed_attention.h): the token's raw
// window in position order, then its compressed rows in index order (all
// complete ones, or the indexer's selection); one key head, its keys the values.
struct WindowAndCompressedRows {
  CompressedAttentionParams a;
  StepIndex step;
  int64_t page_tokens;
  KvLayerView window, rows;
  const int32_t* selected;
  const int32_t* n_selected;
  __device__ DType dtype() const { return window.dtype; }
  __device__ int64_t first_in_window(int64_t t) const { return max(int64_t(0), int64_t(step.positions[t]) - a.window + 1); }
  __device__ int64_t count(int64_t t) const {
    const int64_t p = step.positions[t], n_rows = a.ratio == 0 ? 0 : selected ? int64_t(n_selected[t]) : (p + 1) / a.ratio;
    return p + 1 - first_in_window(t) + n_rows;
  }
  __device__ void row(int64_t t, int64_t, int64_t j, const uint8_t** key, const uint8_t** value) const {
    const int64_t first = first_in_window(t), n_window = int64_t(step.positions[t]) + 1 - first, s = step.seq_of_token[t];
    if (j < n_window) {
      *key = window.k + slot_offset(window, step.window_tables[s], first + j, 0, kv_head_bytes(window));
    } else {
      const int64_t b = selected ? int64_t(selected[t * a.top_k + j - n_window]) : j - n_window;
      *key = rows.k + compressed_row_offset(rows, step.tables[s], a.ratio, page_tokens, b);
    }
    *value = *key;
  }
};

// Block (item = token·head, split): the query rounded to the cache's type,
// then the split's rows in chunks of 128: each warp scores a row at a time,
// its lanes across the key; the running maximum rescales the sums (online
// softmax); each thread accumulates its share of the value dimensions. With
// `sinks` (one logit per head), the first split starts from the head's sink,
// which the softmax's denominator counts and no value goes with.
template <typename Rows>
__global__ void attention_kernel(Rows rows, AttentionShape shape, const float* sinks, const float* q, float* partials, float* out) {
  extern __shared__ float shared[];
  const int64_t head_dim = shape.head_dim, v_dim = shape.v_dim > 0 ? shape.v_dim : shape.head_dim;
  float* query = shared;                        // [head_dim]
  float* weights = shared + head_dim;           // [k_attention_threads]
  __shared__ float reduce[k_attention_threads];
  __shared__ const uint8_t* value_rows[k_attention_threads];  // the chunk's values
  const int64_t item = blockIdx.x, t = item / shape.n_head, h = item % shape.n_head;
  const int64_t kv_head = h / (shape.n_head / shape.n_head_kv);
  const DType dtype = rows.dtype();
  const int type = int(dtype);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  round_to_cache(dtype, q + item * head_dim, head_dim, query);
  __syncthreads();
  const int64_t n_ctx = rows.count(t);
  const int64_t per_split = (n_ctx + gridDim.y - 1) / gridDim.y, begin = blockIdx.y * per_split, end = min(n_ctx, begin + per_split);
  float acc[k_max_value_per_thread] = {};
  const bool sink_here = sinks && blockIdx.y == 0;
  float running_max = sink_here ? sinks[h] : -FLT_MAX, running_sum = sink_here ? 1.0f : 0.0f;
  for (int64_t p0 = begin; p0 < end; p0 += blockDim.x) {
    const int64_t n_here = min(int64_t(blockDim.x), end - p0);
    for (int64_t j = warp; j < n_here; j += k_attention_warps) {
      const uint8_t *key, *value;
      rows.row(t, kv_head, p0 + j, &key, &value);
      float dot = 0.0f;
      for (int64_t i = lane; i < head_dim; i += 32) dot = fmaf(query[i], element(type, key, i), dot);
      for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (lane == 0) {
        weights[j] = dot * shape.scale;
        value_rows[j] = value;
      }
    }
    __syncthreads();
    const float score = threadIdx.x < n_here ? weights[threadIdx.x] : -FLT_MAX;
    reduce[threadIdx.x] = score;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (int(threadIdx.x) < half) reduce[threadIdx.x] = fmaxf(reduce[threadIdx.x], reduce[threadIdx.x + half]);
      __syncthreads();
    }
    const float chunk_max = fmaxf(running_max, reduce[0]);
    __syncthreads();
    const float rescale = expf(running_max - chunk_max);
    running_max = chunk_max;
    const float w = threadIdx.x < n_here ? expf(score - chunk_max) : 0.0f;
    weights[threadIdx.x] = w;
    reduce[threadIdx.x] = w;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (int(threadIdx.x) < half) reduce[threadIdx.x] += reduce[threadIdx.x + half];
      __syncthreads();
    }
    running_sum = running_sum * rescale + reduce[0];
    for (int k = 0; k < k_max_value_per_thread; ++k) acc[k] *= rescale;
    for (int64_t j = 0; j < n_here; ++j) {
      const uint8_t* value = value_rows[j];
      for (int k = 0; k < k_max_value_per_thread; ++k) {
        const int64_t d = threadIdx.x + int64_t(k) * blockDim.x;
        if (d >= v_dim) break;
        acc[k] = fmaf(weights[j], element(type, value, d), acc[k]);
      }
    }
    __syncthreads();
  }
  if (gridDim.y == 1) {  // one split: the output itself
    for (int k = 0; k < k_max_value_per_thread; ++k) {
      const int64_t d = threadIdx.x + int64_t(k) * blockDim.x;
      if (d < v_dim) out[item * v_dim + d] = acc[k] / running_sum;
    }
    return;
  }
  float* part = partials + (item * gridDim.y + blockIdx.y) * (v_dim + 2);
  if (threadIdx.x == 0) {
    part[0] = running_max;
    part[1] = running_sum;
  }
  for (int k = 0; k < k_max_value_per_thread; ++k) {
    const int64_t d = threadIdx.x + int64_t(k) * blockDim.x;
    if (d < v_dim) part[2 + d] = acc[k];
  }
}

// One block per item: its splits' sums rescaled to their common maximum, then normalised.
__global__ void combine_splits_kernel(const float* partials, int64_t splits, int64_t v_dim, float* out) {
  const float* parts = partials + blockIdx.x * splits * (v_dim + 2);
  float max = -FLT_MAX;
  for (int64_t s = 0; s < splits; ++s) max = fmaxf(max, parts[s * (v_dim + 2)]);
  float sum = 0.0f;
  for (int64_t s = 0; s < splits; ++s) sum += parts[s * (v_dim + 2) + 1] * expf(parts[s * (v_dim + 2)] - max);
  for (int64_t d = threadIdx.x; d < v_dim; d += blockDim.x) {
    float value = 0.0f;
    for (int64_t s = 0; s < splits; ++s) value += parts[s * (v_dim + 2) + 2 + d] * expf(parts[s * (v_dim + 2)] - max);
    out[blockIdx.x * v_dim + d] = value / sum;
  }
}

__global__ void gather_pair_rows_kernel(const float* in, const int64_t* pairs, int64_t k, int64_t dim, float* rows) {
  const float* from = in + pairs[blockIdx.x] / k * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) rows[blockIdx.x * dim + j] = from[j];
}

__global__ void scatter_weighted_kernel(const float* rows, const int64_t* pairs, const float* weights, int64_t dim, float* slots) {
  const float w = weights[blockIdx.x];
  float* to = slots + pairs[blockIdx.x] * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) to[j] = rows[blockIdx.x * dim + j] * w;
}

__global__ void sum_slots_kernel(const float* slots, int64_t k, int64_t dim, float* out) {
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    float sum = slots[t * k * dim + j];
    for (int64_t s = 1; s < k; ++s) sum += slots[(t * k + s) * dim + j];
    out[t * dim + j] = sum;
  }
}

}  // namespace

void embed(cudaStream_t s, const WeightMatrix& table, const int32_t* tokens, int64_t n, float* out) {
  embed_kernel<<<unsigned(n), k_threads, 0, s>>>(int(table.type), table.data, table.row_stride_bytes(), tokens, table.n_cols, out);
}

void rms_norm(cudaStream_t s, const float* in, int64_t in_stride, const float* weight, float eps, int64_t n, int64_t dim, float* out,
              int64_t out_stride) {
  rms_norm_kernel<<<unsigned(n), k_threads, 0, s>>>(in, in_stride, weight, eps, dim, out, out_stride);
}

void layer_norm(cudaStream_t s, const float* in, const float* weight, const float* bias, float eps, int64_t n, int64_t dim, float* out) {
  if (n > 0) layer_norm_kernel<<<unsigned(n), k_threads, 0, s>>>(in, weight, bias, eps, dim, out);
}

void add(cudaStream_t s, float* y, const float* x, int64_t n) { add_kernel<<<blocks_for(n), k_threads, 0, s>>>(y, x, n); }

void add_bias(cudaStream_t s, float* y, const float* bias, int64_t n, int64_t dim) {
  add_bias_kernel<<<blocks_for(n * dim), k_threads, 0, s>>>(y, bias, n, dim);
}

void silu_mul(cudaStream_t s, float* gate, const float* up, int64_t n) {
  if (n > 0) swiglu_kernel<<<blocks_for(n), k_threads, 0, s>>>(gate, up, nullptr, n, 0.0f);
}

void swiglu(cudaStream_t s, float* gate, float* up, int64_t n, float limit) {
  if (n > 0) swiglu_kernel<<<blocks_for(n), k_threads, 0, s>>>(gate, up, up, n, limit);
}

void copy_heads(cudaStream_t s, const HeadRows& dst, const HeadRows& src, int64_t n) {
  if (n * src.n_heads > 0) copy_heads_kernel<<<unsigned(n * src.n_heads), 64, 0, s>>>(dst, src, n);
}

void rope(cudaStream_t s, const RopeFactors& f, int n_rot, RopeLayout layout, const float* freq_factors, const int32_t* positions, int64_t n,
          const HeadRows& x) {
  if (n * x.n_heads > 0) rope_kernel<<<unsigned(n * x.n_heads), 64, 0, s>>>(f, n_rot, layout == RopeLayout::neox, freq_factors, positions, x);
}

void kv_write(cudaStream_t s, const KvLayerView& kv, const StepIndex& step, const float* k_rows, const float* v_rows) {
  kv_write_kernel<<<unsigned(step.n_tokens * kv.n_kv_heads), 64, 0, s>>>(kv, step, k_rows, v_rows);
}

namespace {

int64_t scratch_floats(int64_t items, int64_t longest, int64_t value_dim) {
  const int64_t splits = attention_splits(items, longest);
  return splits > 1 ? items * splits * (value_dim + 2) : 0;
}

// attention_kernel over `rows`, then the splits combined.
template <typename Rows>
void attend(cudaStream_t s, const Rows& rows, const AttentionShape& shape, int64_t n_tokens, int64_t longest, const float* sinks,
            const float* q, float* scratch, float* out) {
  DS_CHECK(shape.value_dim() <= int64_t(k_attention_threads) * k_max_value_per_thread, "attention: value rows too wide");
  const int64_t items = n_tokens * shape.n_head, splits = attention_splits(items, longest);
  if (items == 0) return;
  const size_t shared = size_t(shape.head_dim + k_attention_threads) * sizeof(float);
  attention_kernel<<<dim3(unsigned(items), unsigned(splits)), k_attention_threads, shared, s>>>(rows, shape, sinks, q, scratch, out);
  if (splits > 1) combine_splits_kernel<<<unsigned(items), k_attention_threads, 0, s>>>(scratch, splits, shape.value_dim(), out);
}

int64_t paged_longest(const StepIndex& step, const ChosenPositions& chosen) {
  return chosen.positions ? std::min(step.n_ctx, chosen.per_token) : step.n_ctx;
}

int64_t compressed_longest(const CompressedAttentionParams& a, const StepIndex& step, bool selected) {
  const int64_t rows = a.ratio == 0 ? 0 : selected ? std::min(a.top_k, step.n_ctx / a.ratio) : step.n_ctx / a.ratio;
  return std::min(a.window, step.n_ctx) + rows;
}

AttentionShape compressed_shape(const CompressedAttentionParams& a) { return AttentionShape{a.n_head, 1, a.head_dim, a.scale, 0}; }

}  // namespace

int64_t paged_attention_scratch_floats(const AttentionShape& shape, const StepIndex& step, const ChosenPositions& chosen) {
  return scratch_floats(step.n_tokens * shape.n_head, paged_longest(step, chosen), shape.value_dim());
}

void paged_attention(cudaStream_t s, const KvLayerView& kv, const AttentionShape& shape, const StepIndex& step, const ChosenPositions& chosen,
                     const float* q, float* scratch, float* out) {
  attend(s, PagedRows{kv, step, chosen}, shape, step.n_tokens, paged_longest(step, chosen), nullptr, q, scratch, out);
}

int64_t compressed_attention_scratch_floats(const CompressedAttentionParams& a, const StepIndex& step, bool selected) {
  return scratch_floats(step.n_tokens * a.n_head, compressed_longest(a, step, selected), a.head_dim);
}

void compressed_attention(cudaStream_t s, const CompressedAttentionParams& a, const StepIndex& step, int64_t page_tokens, const float* q,
                          const KvLayerView& window, const KvLayerView& rows, const int32_t* selected, const int32_t* n_selected,
                          float* scratch, float* out) {
  attend(s, WindowAndCompressedRows{a, step, page_tokens, window, rows, selected, n_selected}, compressed_shape(a), step.n_tokens,
         compressed_longest(a, step, selected != nullptr), a.sinks, q, scratch, out);
}

void gather_pair_rows(cudaStream_t s, const float* in, const int64_t* pairs, int64_t k, int64_t n, int64_t dim, float* rows) {
  if (n > 0) gather_pair_rows_kernel<<<unsigned(n), k_threads, 0, s>>>(in, pairs, k, dim, rows);
}

void scatter_weighted(cudaStream_t s, const float* rows, const int64_t* pairs, const float* weights, int64_t n, int64_t dim, float* slots) {
  if (n > 0) scatter_weighted_kernel<<<unsigned(n), k_threads, 0, s>>>(rows, pairs, weights, dim, slots);
}

void sum_slots(cudaStream_t s, const float* slots, int64_t n, int64_t k, int64_t dim, float* out) {
  if (n > 0) sum_slots_kernel<<<unsigned(n), k_threads, 0, s>>>(slots, k, dim, out);
}

}  // namespace ds::cuda
