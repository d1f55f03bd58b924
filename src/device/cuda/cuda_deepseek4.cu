// DeepSeek-V4's hyper-connections and KV compressors on the GPU, each kernel
// in its host reference's order of operations (kernels/hyper_connection.cpp,
// kernels/kv_compressor.cpp). The attention over their rows is cuda_ops.cu's
// attention kernel (WindowAndCompressedRows).

#include <cfloat>

#include "device/cuda/cuda_common.cuh"
#include "device/cuda/cuda_launch.h"

namespace ds::cuda {
namespace {

constexpr int k_threads = 256;
constexpr int64_t k_max_streams = 8;  // V4 has 4; the per-token weights live in registers and shared memory

__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// kernels/hyper_connection.cpp's hyper_connection_weights, by one thread (a port: backend code stays in its folder).
__device__ void hyper_connection_weights(const HyperConnectionParams& p, const float* mu, float* pre, float* post, float* mix) {
  const int64_t hc = p.n_streams;
  for (int64_t i = 0; i < hc; ++i) {
    pre[i] = sigmoid(p.scale[0] * mu[i] + p.base[i]) + p.eps;
    post[i] = 2.0f * sigmoid(p.scale[1] * mu[hc + i] + p.base[hc + i]);
  }
  for (int64_t j = 0; j < hc; ++j) {
    float* m = mix + j * hc;
    float max = -FLT_MAX;
    for (int64_t i = 0; i < hc; ++i) {
      m[i] = p.scale[2] * mu[2 * hc + j * hc + i] + p.base[2 * hc + j * hc + i];
      max = fmaxf(max, m[i]);
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < hc; ++i) sum += m[i] = expf(m[i] - max);
    for (int64_t i = 0; i < hc; ++i) m[i] = m[i] / sum + p.eps;
  }
  for (int64_t k = 0; k < p.sinkhorn_iterations; ++k) {
    if (k > 0) {  // over the destinations of each source
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0.0f;
        for (int64_t i = 0; i < hc; ++i) sum += mix[j * hc + i];
        for (int64_t i = 0; i < hc; ++i) mix[j * hc + i] /= sum + p.eps;
      }
    }
    for (int64_t i = 0; i < hc; ++i) {  // over the sources of each destination
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) sum += mix[j * hc + i];
      for (int64_t j = 0; j < hc; ++j) mix[j * hc + i] /= sum + p.eps;
    }
  }
}

// out[e] = sum_i w[i] * x[i * d + e], summed in stream order as the host does, over the block's threads.
__device__ inline void weighted_streams(const float* w, int64_t hc, const float* x, int64_t d, float* out) {
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    float y = w[0] * x[e];
    for (int64_t i = 1; i < hc; ++i) y += w[i] * x[i * d + e];
    out[e] = y;
  }
}

// One block per token: its weights by the first thread, then the sublayer's input.
__global__ void hyper_connection_pre_kernel(HyperConnectionParams p, const float* streams, const float* mix_logits, float* sublayer_in,
                                            float* post, float* mix) {
  __shared__ float pre[k_max_streams];
  const int64_t t = blockIdx.x, hc = p.n_streams, d = p.dim;
  const int64_t n_mix = hc * (2 + hc);  // HyperConnectionParams::n_mix(), a host function
  if (threadIdx.x == 0) hyper_connection_weights(p, mix_logits + t * n_mix, pre, post + t * hc, mix + t * hc * hc);
  __syncthreads();
  weighted_streams(pre, hc, streams + t * hc * d, d, sublayer_in + t * d);
}

// Block (token, a share of the elements): each thread reads its element of
// every stream before writing any.
__global__ void hyper_connection_post_kernel(HyperConnectionParams p, float* streams, const float* block_out, const float* post,
                                             const float* mix) {
  const int64_t t = blockIdx.x, hc = p.n_streams, d = p.dim, e = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (e >= d) return;
  float* x = streams + t * hc * d;
  const float* m = mix + t * hc * hc;
  float old[k_max_streams];
  for (int64_t j = 0; j < hc; ++j) old[j] = x[j * d + e];
  for (int64_t i = 0; i < hc; ++i) {
    float y = post[t * hc + i] * block_out[t * d + e];
    for (int64_t j = 0; j < hc; ++j) y += m[j * hc + i] * old[j];
    x[i * d + e] = y;
  }
}

// One block per token: the head's weights, then the streams' weighted sum.
__global__ void hyper_connection_head_kernel(HyperConnectionParams p, const float* streams, const float* mix_logits, float* out) {
  __shared__ float w[k_max_streams];
  const int64_t t = blockIdx.x, hc = p.n_streams, d = p.dim;
  if (threadIdx.x < hc) w[threadIdx.x] = sigmoid(p.scale[0] * mix_logits[t * hc + threadIdx.x] + p.base[threadIdx.x]) + p.eps;
  __syncthreads();
  weighted_streams(w, hc, streams + t * hc * d, d, out + t * d);
}

// Whether token u of the step is the same sequence's token at `position`: a
// sequence's tokens in a step are consecutive positions, in order, so the
// step holds a sequence's position q exactly when the token that many places
// from t does.
__device__ inline bool step_holds(const StepIndex& step, int64_t t, int64_t u, int64_t position) {
  return u >= 0 && u < step.n_tokens && step.seq_of_token[u] == step.seq_of_token[t] && int64_t(step.positions[u]) == position;
}

// One block per token: its state row [kv | score + ape[position % ratio]]
// stored in the KV type into `stored` and read back into `rounded` (f32), the
// values the rows formed in this step pool.
__global__ void compressor_state_kernel(KvCompressorParams c, int64_t w, StepIndex step, const float* kv, const float* score, DType type,
                                        int64_t row_bytes, uint8_t* stored, float* rounded) {
  extern __shared__ float row[];  // [2 * w]
  const int64_t t = blockIdx.x;
  const float* ape = c.ape + int64_t(step.positions[t]) % c.ratio * w;
  for (int64_t i = threadIdx.x; i < w; i += blockDim.x) {
    row[i] = kv[t * w + i];
    row[w + i] = score[t * w + i] + ape[i];
  }
  __syncthreads();
  uint8_t* bytes = stored + t * row_bytes;
  store_row(type, row, 2 * w, bytes);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < 2 * w; i += blockDim.x) rounded[t * 2 * w + i] = element(int(type), bytes, i);
}

// One block per token; a token that completes its block forms the block's
// row: per channel, the softmax of the pooled tokens' scores weighs their
// values (the step's own tokens' state from `rounded`, earlier ones from the
// ring in the window pages), then RMSNorm, RoPE at the block's first position
// on the last n_rot elements, stored in the page of the block's last token.
__global__ void compressor_rows_kernel(KvCompressorParams c, int64_t w, RopeFactors rope, StepIndex step, int64_t page_tokens,
                                       const float* rounded, KvLayerView state, KvLayerView rows) {
  extern __shared__ float out[];  // [dim]
  __shared__ double partial[k_threads];
  const int64_t t = blockIdx.x, p = step.positions[t], r = c.ratio, dim = c.dim;
  if ((p + 1) % r != 0) return;
  const int64_t b = p / r, first = c.overlap && b > 0 ? (b - 1) * r : b * r, n_rows = b * r + r - first;
  const BlockTableView window_table = step.window_tables[step.seq_of_token[t]];
  const int state_type = int(state.dtype);
  for (int64_t e = threadIdx.x; e < dim; e += blockDim.x) {
    // Entry j's score and value for channel e: the current block's tokens take the second halves (with overlap).
    const auto entry = [&](int64_t j, bool score_part) {
      const int64_t q = first + j, u = t - (p - q);
      const int64_t column = (score_part ? w : 0) + (c.overlap && j >= n_rows - r ? dim : 0) + e;
      if (step_holds(step, t, u, q)) return rounded[u * 2 * w + column];
      return element(state_type, state.k + state_row_offset(state, window_table, page_tokens, q), column);
    };
    float max = -FLT_MAX;
    for (int64_t j = 0; j < n_rows; ++j) max = fmaxf(max, entry(j, true));
    float sum = 0.0f, acc = 0.0f;
    for (int64_t j = 0; j < n_rows; ++j) {
      const float weight = expf(entry(j, true) - max);
      sum += weight;
      acc += weight * entry(j, false);
    }
    out[e] = acc / sum;
  }
  __syncthreads();
  double squares = 0.0;  // RMSNorm as rms_norm_kernel: squares in f32, summed in f64
  for (int64_t e = threadIdx.x; e < dim; e += blockDim.x) squares += double(out[e] * out[e]);
  const float scale = 1.0f / sqrtf(float(block_sum(squares, partial) / double(dim)) + c.eps);
  for (int64_t e = threadIdx.x; e < dim; e += blockDim.x) out[e] = out[e] * scale * c.norm[e];
  __syncthreads();
  const int n_rot = c.rope.n_rot;
  for (int i = threadIdx.x; i < n_rot / 2; i += blockDim.x) {
    rotate_pair(rope, n_rot, c.rope.layout == RopeLayout::neox, c.rope.freq_factors, int32_t(b * r), i, out + dim - n_rot);
  }
  __syncthreads();
  store_row(rows.dtype, out, dim, rows.k + compressed_row_offset(rows, step.tables[step.seq_of_token[t]], r, page_tokens, b));
}

// One block per token: its stored state row into its slot, unless a later
// token of the step takes the same slot of the same page (a ring of `ring`
// rows); after every row is formed, since the slots held rows read before.
__global__ void compressor_store_kernel(StepIndex step, int64_t page_tokens, const uint8_t* stored, int64_t row_bytes, KvLayerView state) {
  const int64_t t = blockIdx.x, p = step.positions[t], ring = state.page_tokens;
  const int64_t later = p + ring;
  if (later / page_tokens == p / page_tokens && step_holds(step, t, t + ring, later)) return;
  uint8_t* to = state.k + state_row_offset(state, step.window_tables[step.seq_of_token[t]], page_tokens, p);
  for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) to[i] = stored[t * row_bytes + i];
}

int64_t state_row_bytes(const KvCompressorParams& c, DType state_type) { return row_bytes(state_type, 2 * c.width()); }

}  // namespace

void hyper_connection_pre(cudaStream_t s, const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                          float* sublayer_in, float* post, float* mix) {
  DS_CHECK(p.n_streams <= k_max_streams, "cuda: hyper-connections of more than 8 streams");
  if (n > 0) hyper_connection_pre_kernel<<<unsigned(n), k_threads, 0, s>>>(p, streams, mix_logits, sublayer_in, post, mix);
}

void hyper_connection_post(cudaStream_t s, const HyperConnectionParams& p, float* streams, const float* block_out, const float* post,
                           const float* mix, int64_t n) {
  DS_CHECK(p.n_streams <= k_max_streams, "cuda: hyper-connections of more than 8 streams");
  const unsigned shares = unsigned((p.dim + k_threads - 1) / k_threads);
  if (n > 0) hyper_connection_post_kernel<<<dim3(unsigned(n), shares), k_threads, 0, s>>>(p, streams, block_out, post, mix);
}

void hyper_connection_head(cudaStream_t s, const HyperConnectionParams& p, const float* streams, const float* mix_logits, int64_t n,
                           float* out) {
  DS_CHECK(p.n_streams <= k_max_streams, "cuda: hyper-connections of more than 8 streams");
  if (n > 0) hyper_connection_head_kernel<<<unsigned(n), k_threads, 0, s>>>(p, streams, mix_logits, out);
}

size_t kv_compress_scratch_bytes(const KvCompressorParams& c, const StepIndex& step, DType state_type) {
  return size_t(step.n_tokens) * (size_t(state_row_bytes(c, state_type)) + size_t(2 * c.width()) * sizeof(float));
}

void kv_compress(cudaStream_t s, const KvCompressorParams& c, const StepIndex& step, int64_t page_tokens, const float* kv, const float* score,
                 const KvLayerView& state, const KvLayerView& rows, uint8_t* scratch) {
  // The rows' RoPE factors are the step's: the host's, at the row's own position, differ only under dynamic NTK.
  DS_CHECK(c.rope.scaling != RopeScaling::dynamic_ntk, "cuda: kv_compress with dynamic NTK RoPE");
  const int64_t n = step.n_tokens, bytes = state_row_bytes(c, state.dtype);
  if (n == 0) return;
  float* rounded = reinterpret_cast<float*>(scratch);
  uint8_t* stored = scratch + size_t(n * 2 * c.width()) * sizeof(float);
  const int64_t w = c.width();
  compressor_state_kernel<<<unsigned(n), k_threads, size_t(2 * w) * sizeof(float), s>>>(c, w, step, kv, score, state.dtype, bytes, stored, rounded);
  compressor_rows_kernel<<<unsigned(n), k_threads, size_t(c.dim) * sizeof(float), s>>>(c, w, rope_factors(c.rope, step.n_ctx), step, page_tokens,
                                                                                         rounded, state, rows);
  compressor_store_kernel<<<unsigned(n), k_threads, 0, s>>>(step, page_tokens, stored, bytes, state);
}

}  // namespace ds::cuda
