#include "kernels/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/status.h"
#include "kernels/attention_tiles.h"

namespace ds {
namespace {

// Queries of one head that pass over a tile of keys together: each key row,
// once in L1, meets all of them.
constexpr int64_t k_query_tile = 16;

}  // namespace

void FlashAttentionState::reset(int64_t heads, int64_t tokens, int64_t value_dim) {
  n_head = heads, n_tokens = tokens, v_dim = value_dim;
  out.assign(size_t(heads * tokens * value_dim), 0.0f);
  max.assign(size_t(heads * tokens), -INFINITY);
  sum.assign(size_t(heads * tokens), 0.0f);
}

void flash_attention_block(ThreadPool& pool, const AttentionShape& shape, const float* q, int64_t q_stride,
                           const int32_t* positions, const float* k, const float* v, int64_t p0, int64_t n_keys,
                           FlashAttentionState& state, FlashAttentionScratch& scratch) {
  const int64_t head_dim = shape.head_dim, v_dim = shape.value_dim(), n = state.n_tokens;
  DS_CHECK(p0 % k_flash_key_tile == 0, "flash_attention_block: blocks start at multiples of the key tile");
  DS_CHECK(state.n_head == shape.n_head && state.v_dim == v_dim, "flash_attention_block: the state has another shape");
  const AttentionTileKernels& tiles = attention_tile_kernels();
  if (int(scratch.threads.size()) < pool.n_threads()) scratch.threads.resize(size_t(pool.n_threads()));
  for (FlashAttentionScratch::PerThread& buffers : scratch.threads) {
    buffers.queries.resize(size_t(k_query_tile * head_dim));
    buffers.scores.resize(size_t(k_query_tile * k_flash_key_tile));
  }
  const int64_t query_tiles = (n + k_query_tile - 1) / k_query_tile;
  pool.parallel_for_dynamic(shape.n_head * query_tiles, 1, [&](int64_t begin, int64_t end, int thread_index) {
    FlashAttentionScratch::PerThread& buffers = scratch.threads[size_t(thread_index)];
    float* queries = buffers.queries.data();
    float* scores = buffers.scores.data();
    for (int64_t item = begin; item < end; ++item) {
      const int64_t h = item / query_tiles, t0 = item % query_tiles * k_query_tile, m = std::min(k_query_tile, n - t0);
      const int64_t last = *std::max_element(positions + t0, positions + t0 + m);
      if (last < p0) continue;
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(queries + i * head_dim, q + (t0 + i) * q_stride + h * head_dim, size_t(head_dim) * sizeof(float));
      }
      float* out = state.out.data() + (h * n + t0) * v_dim;
      float* max = state.max.data() + h * n + t0;
      float* sum = state.sum.data() + h * n + t0;
      for (int64_t s0 = p0; s0 < p0 + n_keys && s0 <= last; s0 += k_flash_key_tile) {
        const int64_t n_sub = std::min(k_flash_key_tile, p0 + n_keys - s0);
        tiles.scores(head_dim, queries, m, k + (h * n_keys + s0 - p0) * head_dim, n_sub, shape.scale, scores, k_flash_key_tile);
        for (int64_t i = 0; i < m; ++i) {
          float* row = scores + i * k_flash_key_tile;
          const int64_t valid = std::clamp<int64_t>(positions[t0 + i] - s0 + 1, 0, n_sub);
          const float correction = tiles.online_softmax(row, valid, max + i, sum + i);
          std::fill(row + valid, row + n_sub, 0.0f);  // positions after the query's own: no weight
          if (correction != 1.0f) {
            for (int64_t d = 0; d < v_dim; ++d) out[i * v_dim + d] *= correction;
          }
        }
        tiles.weighted_sum(v_dim, scores, k_flash_key_tile, m, v + (h * n_keys + s0 - p0) * v_dim, n_sub, out);
      }
    }
  });
}

void flash_attention_finish(ThreadPool& pool, const FlashAttentionState& state, float* out, int64_t out_stride) {
  const int64_t n = state.n_tokens, v_dim = state.v_dim;
  pool.parallel_for(n, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t h = 0; h < state.n_head; ++h) {
        const float inv = 1.0f / state.sum[size_t(h * n + t)];
        const float* o = state.out.data() + (h * n + t) * v_dim;
        for (int64_t d = 0; d < v_dim; ++d) out[t * out_stride + h * v_dim + d] = o[d] * inv;
      }
    }
  });
}

void dense_attention_reference(const AttentionShape& shape, const float* q, int64_t q_stride, const int32_t* positions,
                               int64_t n_tokens, const float* k, const float* v, int64_t n_keys, float* out,
                               int64_t out_stride) {
  const int64_t head_dim = shape.head_dim, v_dim = shape.value_dim();
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t n_ctx = positions[t] + 1;
    DS_CHECK(n_ctx <= n_keys, "dense_attention_reference: a position beyond the keys");
    for (int64_t h = 0; h < shape.n_head; ++h) {
      std::vector<double> scores(static_cast<size_t>(n_ctx));
      double max = -INFINITY;
      for (int64_t p = 0; p < n_ctx; ++p) {
        double s = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) s += double(q[t * q_stride + h * head_dim + d]) * k[(h * n_keys + p) * head_dim + d];
        scores[size_t(p)] = s * shape.scale;
        max = std::max(max, scores[size_t(p)]);
      }
      double total = 0.0;
      for (double& s : scores) total += (s = std::exp(s - max));
      for (int64_t d = 0; d < v_dim; ++d) {
        double o = 0.0;
        for (int64_t p = 0; p < n_ctx; ++p) o += scores[size_t(p)] * v[(h * n_keys + p) * v_dim + d];
        out[t * out_stride + h * v_dim + d] = float(o / total);
      }
    }
  }
}

}  // namespace ds
