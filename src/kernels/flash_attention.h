#pragma once
// Causal attention over keys and values held as dense rows instead of pages,
// one block of positions at a time, with FlashAttention's online softmax
// carried from block to block: the attention of multi-head latent attention's
// expanded form, which up-projects the cached latents a block at a time and
// never holds the whole context's keys and values.
//
// A token's result depends only on its own position and the rows: positions
// go by in tiles at fixed absolute offsets (multiples of k_flash_key_tile),
// every score is one dot product and every output row accumulates positions
// in order, so the tokens sharing its call do not change it.

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/paged_attention.h"

namespace ds {

constexpr int64_t k_flash_key_tile = 32;

// The running state of n_tokens queries of n_head heads: out [n_head][n_tokens]
// [v_dim] (not yet divided by the sums), max and sum [n_head][n_tokens].
struct FlashAttentionState {
  int64_t n_head = 0, n_tokens = 0, v_dim = 0;
  std::vector<float> out, max, sum;
  void reset(int64_t heads, int64_t tokens, int64_t value_dim);
};

// Per-thread buffers: a tile of queries and its scores.
struct FlashAttentionScratch {
  struct PerThread {
    std::vector<float> queries, scores;
  };
  std::vector<PerThread> threads;
};

// One block of keys k [n_head][n_keys][head_dim] and values v [n_head][n_keys]
// [v_dim] at positions [p0, p0 + n_keys), p0 a multiple of k_flash_key_tile,
// for queries q (token t's head h at q + t * q_stride + h * head_dim) at
// positions[t], each attending to the positions up to its own.
void flash_attention_block(ThreadPool& pool, const AttentionShape& shape, const float* q, int64_t q_stride,
                           const int32_t* positions, const float* k, const float* v, int64_t p0, int64_t n_keys,
                           FlashAttentionState& state, FlashAttentionScratch& scratch);

// out (t, h) = the state's output row / its sum: out + t * out_stride + h * v_dim.
void flash_attention_finish(ThreadPool& pool, const FlashAttentionState& state, float* out, int64_t out_stride);

// The plain reference: all positions [0, positions[t]] at once, k [n_head]
// [n_keys][head_dim] and v [n_head][n_keys][v_dim] from position 0, in double.
void dense_attention_reference(const AttentionShape& shape, const float* q, int64_t q_stride, const int32_t* positions,
                               int64_t n_tokens, const float* k, const float* v, int64_t n_keys, float* out,
                               int64_t out_stride);

}  // namespace ds
