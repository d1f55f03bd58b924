// DeepSeek-V3.2's lightning indexer on the GPU (kernels/sparse_attention.h's
// indexer_select): each token's score of every cached position of its
// sequence, then its top_k by a radix select over (score, position) keys, so
// that ties go to the lower position as on the host, written ascending.

#include <algorithm>

#include "device/cuda/cuda_common.cuh"
#include "device/cuda/cuda_launch.h"

namespace ds::cuda {
namespace {

constexpr int k_score_warps = 8;                        // positions a block scores at once
constexpr int64_t k_positions_per_block = 128;          // a block's share of a token's positions
constexpr int64_t k_scores_budget = int64_t(64) << 20;  // scores held at once (256 MiB): a long prefill goes in groups of tokens
constexpr int k_select_threads = 1024;

// Block (tile of positions, token of the group): the token's queries rounded
// to the cache's type in shared memory; each warp takes a position, copies its
// key there, and sums the heads in order as the host does: score =
// sum_h (weights[h] * weight_scale) * relu(q_h · key).
__global__ void indexer_scores_kernel(KvLayerView keys, StepIndex step, int64_t first_token, const float* q, int64_t n_heads,
                                      const float* weights, float weight_scale, int64_t top_k, int64_t stride, float* scores) {
  extern __shared__ float shared[];
  const int64_t t = first_token + blockIdx.y, n_ctx = int64_t(step.positions[t]) + 1, dim = keys.kv_dim;
  if (n_ctx <= top_k) return;  // it takes every position, unscored
  float* query = shared;                                           // [n_heads * dim]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* key = shared + n_heads * dim + warp * dim;                // [dim] per warp
  round_to_cache(keys.dtype, q + t * n_heads * dim, n_heads * dim, query);
  __syncthreads();
  const BlockTableView table = step.tables[step.seq_of_token[t]];
  const int64_t bytes = kv_head_bytes(keys);
  const int type = int(keys.dtype);
  for (int64_t p = blockIdx.x * int64_t(k_score_warps) + warp; p < n_ctx; p += int64_t(gridDim.x) * k_score_warps) {
    const uint8_t* row = keys.k + slot_offset(keys, table, p, 0, bytes);
    for (int64_t i = lane; i < dim; i += 32) key[i] = element(type, row, i);
    __syncwarp();
    float score = 0.0f;
    for (int64_t h = 0; h < n_heads; ++h) {
      float dot = 0.0f;
      for (int64_t i = lane; i < dim; i += 32) dot = fmaf(query[h * dim + i], key[i], dot);
      for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      score += weights[t * n_heads + h] * weight_scale * fmaxf(0.0f, dot);
    }
    if (lane == 0) scores[blockIdx.y * stride + p] = score;
    __syncwarp();
  }
}

// A position's rank key: the score's bits made to order as unsigned integers
// above the position's complement, so that of equal scores the lower position
// ranks higher. Every key of a token differs.
__device__ inline uint64_t rank_key(float score, int64_t p) {
  const uint32_t bits = __float_as_uint(score + 0.0f);  // -0 as +0: they tie, as on the host
  const uint32_t ordered = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
  return uint64_t(ordered) << 32 | uint64_t(0xFFFFFFFFu - uint32_t(p));
}

// One block per token of the group: the top_k-th largest key found a byte at
// a time from the top (a histogram of the keys that share the bytes found so
// far), then the positions at or above it written in ascending order.
__global__ void top_k_kernel(StepIndex step, int64_t first_token, int64_t top_k, int64_t stride, const float* scores, int32_t* selected,
                             int32_t* n_selected) {
  const int64_t t = first_token + blockIdx.x, n_ctx = int64_t(step.positions[t]) + 1;
  int32_t* out = selected + t * top_k;
  if (n_ctx <= top_k) {
    for (int64_t p = threadIdx.x; p < n_ctx; p += blockDim.x) out[p] = int32_t(p);
    if (threadIdx.x == 0) n_selected[t] = int32_t(n_ctx);
    return;
  }
  const float* row = scores + blockIdx.x * stride;
  __shared__ uint32_t histogram[256];
  __shared__ uint64_t found_shared;
  __shared__ int64_t need_shared;
  uint64_t found = 0;  // the k-th key's bytes above `shift`
  int64_t need = top_k;  // of the keys sharing them, how many are still to be taken
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) histogram[i] = 0;
    __syncthreads();
    for (int64_t p = threadIdx.x; p < n_ctx; p += blockDim.x) {
      const uint64_t key = rank_key(row[p], p);
      if (shift == 56 || key >> (shift + 8) == found >> (shift + 8)) atomicAdd(&histogram[(key >> shift) & 255], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t above = 0;
      int digit = 255;
      while (digit > 0 && above + histogram[digit] < need) above += histogram[digit--];
      found_shared = found | uint64_t(digit) << shift;
      need_shared = need - above;
    }
    __syncthreads();
    found = found_shared;
    need = need_shared;
  }
  __shared__ int32_t warp_counts[k_select_threads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t base = 0;
  for (int64_t p0 = 0; p0 < n_ctx; p0 += blockDim.x) {
    const int64_t p = p0 + threadIdx.x;
    const bool take = p < n_ctx && rank_key(row[p], p) >= found;
    const unsigned taken = __ballot_sync(0xffffffffu, take);
    if (lane == 0) warp_counts[warp] = __popc(taken);
    __syncthreads();
    int64_t before = 0, total = 0;
    for (int w = 0; w < int(blockDim.x / 32); ++w) {
      if (w < warp) before += warp_counts[w];
      total += warp_counts[w];
    }
    if (take) out[base + before + __popc(taken & ((1u << lane) - 1))] = int32_t(p);
    base += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) n_selected[t] = int32_t(top_k);
}

// Tokens whose scores are held at once (at most a grid's 65535 rows).
int64_t group_tokens(const StepIndex& step) {
  return std::clamp<int64_t>(k_scores_budget / std::max<int64_t>(1, step.n_ctx), 1, std::min<int64_t>(step.n_tokens, 65535));
}

}  // namespace

int64_t indexer_scores_floats(const StepIndex& step, int64_t top_k) { return step.n_ctx <= top_k ? 0 : group_tokens(step) * step.n_ctx; }

void indexer_select(cudaStream_t s, const KvLayerView& keys, const StepIndex& step, const float* q, int64_t n_heads, const float* weights,
                    float weight_scale, int64_t top_k, float* scores, int32_t* selected, int32_t* n_selected) {
  if (step.n_tokens == 0) return;
  const size_t shared = size_t((n_heads + k_score_warps) * keys.kv_dim) * sizeof(float);
  DS_CUDA_CHECK(cudaFuncSetAttribute(indexer_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)));
  const int64_t group = group_tokens(step), stride = step.n_ctx;
  const unsigned tiles = unsigned(std::clamp<int64_t>((step.n_ctx + k_positions_per_block - 1) / k_positions_per_block, 1, 1024));
  for (int64_t first = 0; first < step.n_tokens; first += group) {
    const unsigned m = unsigned(std::min(group, step.n_tokens - first));
    if (step.n_ctx > top_k) {
      indexer_scores_kernel<<<dim3(tiles, m), 32 * k_score_warps, shared, s>>>(keys, step, first, q, n_heads, weights, weight_scale, top_k,
                                                                               stride, scores);
    }
    top_k_kernel<<<m, k_select_threads, 0, s>>>(step, first, top_k, stride, scores, selected, n_selected);
  }
}

}  // namespace ds::cuda
