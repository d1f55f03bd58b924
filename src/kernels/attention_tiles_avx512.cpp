// AVX-512 attention tiles (kernels/attention_tiles.h) with the AVX2 tiles'
// bits, for long prompts, where attention is most of a step. Scores: a zmm
// holds two queries' 8-lane accumulators against one key side by side, each
// lane adding the AVX2 tile's products in its order, and hsum8 sums each half
// as it sums theirs, so one FMA does the work of two (each pair of query chunks
// joined once per key tile, the keys broadcast to both halves as they load).
// The weighted sum is elementwise, so 16 elements a register add what 8 did.
// Softmax and the cache conversions are the AVX2 kernels'. Compiled with
// -mavx512f (and AVX2, FMA, F16C); called only where use_vnni_kernels().

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention_tiles.h"
#include "kernels/hsum_avx2.h"
#include "kernels/tiles_of_four.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a variable
// initialised from itself, and warn about it at every inlining site.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ds {
namespace {

// QP pairs of queries (rows 2p and 2p + 1 of q, put side by side in a zmm
// chunk by chunk; an odd last query is paired with itself, the copy's sums
// unused) x NK keys.
template <int QP, int NK>
void scores_tile(int64_t dim, const float* q, int64_t n_q, const float* k, float scale, float* scores, int64_t scores_stride) {
  const float* second[QP];
  for (int p = 0; p < QP; ++p) second[p] = q + std::min<int64_t>(2 * p + 1, n_q - 1) * dim;
  __m512 acc[QP][NK];
#pragma GCC unroll 8
  for (int p = 0; p < QP; ++p) {
#pragma GCC unroll 8
    for (int j = 0; j < NK; ++j) acc[p][j] = _mm512_setzero_ps();
  }
  const int64_t d = dim / 8 * 8;
  for (int64_t c = 0; c < d; c += 8) {
    __m512 keys[NK];
#pragma GCC unroll 8
    for (int j = 0; j < NK; ++j) keys[j] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(k + j * dim + c))));
#pragma GCC unroll 8
    for (int p = 0; p < QP; ++p) {
      const __m512d first = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(q + 2 * p * dim + c)));
      const __m512 queries = _mm512_castpd_ps(_mm512_insertf64x4(first, _mm256_castps_pd(_mm256_loadu_ps(second[p] + c)), 1));
#pragma GCC unroll 8
      for (int j = 0; j < NK; ++j) acc[p][j] = _mm512_fmadd_ps(queries, keys[j], acc[p][j]);
    }
  }
  // The halves, eight at a time through hsum8: half h of acc[p][j] is the
  // pair (query 2p + h, key j).
  constexpr int k_halves = 2 * QP * NK;
  alignas(32) float sums[(k_halves + 7) / 8 * 8];
  __m256 batch[8];
  for (int start = 0; start < k_halves; start += 8) {
    for (int n = 0; n < 8; ++n) {
      const int at = start + n;
      if (at >= k_halves) {
        batch[n] = _mm256_setzero_ps();
        continue;
      }
      const __m512 a = acc[at / (2 * NK)][at / 2 % NK];
      batch[n] = at % 2 ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)) : _mm512_castps512_ps256(a);
    }
    _mm256_store_ps(sums + start, hsum8(batch));
  }
  for (int p = 0; p < QP; ++p) {
    for (int h = 0; h < 2 && 2 * p + h < n_q; ++h) {
      const int64_t i = 2 * p + h;
      for (int j = 0; j < NK; ++j) {
        float sum = sums[(p * NK + j) * 2 + h];
        for (int64_t e = d; e < dim; ++e) sum += q[i * dim + e] * k[j * dim + e];
        scores[i * scores_stride + j] = sum * scale;
      }
    }
  }
}

void scores_avx512(int64_t dim, const float* q, int64_t n_q, const float* k, int64_t n_k, float scale, float* scores,
                   int64_t scores_stride) {
  for_tiles_of_four((n_q + 1) / 2, [&](auto pairs, int64_t p) {
    for_tiles_of_four(n_k, [&](auto keys, int64_t j) {
      scores_tile<pairs.value, keys.value>(dim, q + 2 * p * dim, n_q - 2 * p, k + j * dim, scale, scores + 2 * p * scores_stride + j,
                                           scores_stride);
    });
  });
}

// NQ output rows x W registers of 16 elements held while every value row passes.
template <int NQ, int W>
void weighted_sum_tile(int64_t dim, const float* p, int64_t p_stride, const float* v, int64_t n_v, float* out) {
  __m512 acc[NQ][W];
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 8
    for (int w = 0; w < W; ++w) acc[i][w] = _mm512_loadu_ps(out + i * dim + 16 * w);
  }
  for (int64_t j = 0; j < n_v; ++j) {
    __m512 values[W];
#pragma GCC unroll 8
    for (int w = 0; w < W; ++w) values[w] = _mm512_loadu_ps(v + j * dim + 16 * w);
#pragma GCC unroll 8
    for (int i = 0; i < NQ; ++i) {
      const __m512 weight = _mm512_set1_ps(p[i * p_stride + j]);
#pragma GCC unroll 8
      for (int w = 0; w < W; ++w) acc[i][w] = _mm512_fmadd_ps(weight, values[w], acc[i][w]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 8
    for (int w = 0; w < W; ++w) _mm512_storeu_ps(out + i * dim + 16 * w, acc[i][w]);
  }
}

template <int NQ>
void weighted_sum_rows(int64_t dim, const float* p, int64_t p_stride, const float* v, int64_t n_v, float* out) {
  int64_t d = 0;
  for (; d + 64 <= dim; d += 64) weighted_sum_tile<NQ, 4>(dim, p, p_stride, v + d, n_v, out + d);
  for (; d + 16 <= dim; d += 16) weighted_sum_tile<NQ, 1>(dim, p, p_stride, v + d, n_v, out + d);
  for (; d < dim; ++d) {
    for (int i = 0; i < NQ; ++i) {
      for (int64_t j = 0; j < n_v; ++j) out[i * dim + d] = std::fma(p[i * p_stride + j], v[j * dim + d], out[i * dim + d]);
    }
  }
}

void weighted_sum_avx512(int64_t dim, const float* p, int64_t p_stride, int64_t n_q, const float* v, int64_t n_v,
                         float* out) {
  for_tiles_of_four(n_q, [&](auto rows, int64_t i) { weighted_sum_rows<rows.value>(dim, p + i * p_stride, p_stride, v, n_v, out + i * dim); });
}

}  // namespace

AttentionTileKernels attention_tile_kernels_avx512() {
  AttentionTileKernels kernels = attention_tile_kernels_avx2();
  kernels.scores = scores_avx512;
  kernels.weighted_sum = weighted_sum_avx512;
  return kernels;
}

}  // namespace ds
