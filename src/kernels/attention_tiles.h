#pragma once
// The two products of attention over a tile of cached positions, in f32:
// scores = scale * Q·Kᵀ for the query heads that share one KV head, and
// out += P·V. The cache's keys and values are converted to f32 once per tile
// and then meet every head of the group, instead of once per head (a group is
// 4-8 heads for grouped-query models, all 16-128 for multi-head latent
// attention).
//
// Every (query, key) pair is one dot product whose summation order does not
// depend on the tile shape, and out accumulates positions in order, so a
// token's result does not depend on how many tokens share its step.

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

// scores[i * scores_stride + j] = scale * q_i · k_j for n_q query rows and n_k
// key rows of dim elements, each set of rows contiguous.
using TileScoresFn = void (*)(int64_t dim, const float* q, int64_t n_q, const float* k, int64_t n_k, float scale,
                              float* scores, int64_t scores_stride);

// out_i += sum over j < n_v of p[i * p_stride + j] * v_j, j in order, for n_q
// rows of out; v: n_v rows of dim, out: n_q rows of dim, both contiguous.
using TileWeightedSumFn = void (*)(int64_t dim, const float* p, int64_t p_stride, int64_t n_q, const float* v,
                                   int64_t n_v, float* out);

// n cache elements of `type` (f32, f16 or q8_0) to f32.
using CacheToF32Fn = void (*)(DType type, const void* x, float* y, int64_t n);

// y = n f32 values rounded to the cache's type and back (whole q8_0 blocks),
// the queries as they meet the cached keys; the same bits in every kernel set.
using CacheRoundFn = void (*)(DType type, const float* x, float* y, int64_t n);

// One row of a flash-style pass (FlashAttention's online softmax): the row's
// scores of a new tile of n positions become exp(x - m') with m' = max(*max,
// max x) in place; *sum becomes *sum * exp(*max - m') + their sum and *max
// m'. Returns exp(*max - m'), the factor the row's accumulated output takes
// (0 on the first tile, *max = -inf; 1 for n = 0, which changes nothing).
using OnlineSoftmaxFn = float (*)(float* x, int64_t n, float* max, float* sum);

struct AttentionTileKernels {
  TileScoresFn scores;
  TileWeightedSumFn weighted_sum;
  CacheToF32Fn to_f32;
  CacheRoundFn round_to_cache;
  OnlineSoftmaxFn online_softmax;
};

// The portable round trip, which the AVX2 one uses for types without a faster one.
void round_to_cache_portable(DType type, const float* x, float* y, int64_t n);

// The fastest kernels this CPU runs.
const AttentionTileKernels& attention_tile_kernels();

AttentionTileKernels attention_tile_kernels_portable();
AttentionTileKernels attention_tile_kernels_avx2();
// AVX-512 scores, weighted sums and online softmax with the AVX2 ones' bits
// (the cache conversions AVX2's); only where use_vnni_kernels().
AttentionTileKernels attention_tile_kernels_avx512();

}  // namespace ds
