// AVX-512 attention tiles (kernels/attention_tiles.h) with the AVX2 tiles'
// bits, for long prompts, where attention is most of a step. Scores: a zmm
// holds two queries' 8-lane accumulators against one key side by side, each
// lane adding the AVX2 tile's products in its order, and hsum8 sums each half
// as it sums theirs, so one FMA does the work of two (the queries are laid in
// pairs once per call, the keys broadcast to both halves as they are loaded).
// The weighted sum is elementwise, so 16 elements a register add what 8 did.
// Softmax and the cache conversions are the AVX2 kernels'. Compiled with
// -mavx512f (and AVX2, FMA, F16C); called only where use_vnni_kernels().

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention_tiles.h"
#include "kernels/hsum_avx2.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a variable
// initialised from itself, and warn about it at every inlining site.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ds {
namespace {

// QP pairs of queries x NK keys. Query pair p's chunk c (8 elements of each
// query) is 16 floats at pairs + (p * n_chunks + c) * 16.
template <int QP, int NK>
void scores_tile(int64_t dim, const float* pairs, int64_t n_chunks, const float* q, int64_t n_q, const float* k, float scale,
                 float* scores, int64_t scores_stride) {
  __m512 acc[QP][NK];
#pragma GCC unroll 8
  for (int p = 0; p < QP; ++p) {
#pragma GCC unroll 8
    for (int j = 0; j < NK; ++j) acc[p][j] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < n_chunks; ++c) {
    __m512 keys[NK];
#pragma GCC unroll 8
    for (int j = 0; j < NK; ++j) keys[j] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(k + j * dim + 8 * c))));
#pragma GCC unroll 8
    for (int p = 0; p < QP; ++p) {
      const __m512 queries = _mm512_loadu_ps(pairs + (p * n_chunks + c) * 16);
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
  const int64_t d = 8 * n_chunks;
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

template <int QP>
void scores_rows(int64_t dim, const float* pairs, int64_t n_chunks, const float* q, int64_t n_q, const float* k, int64_t n_k,
                 float scale, float* scores, int64_t scores_stride) {
  int64_t j = 0;
  for (; j + 4 <= n_k; j += 4) scores_tile<QP, 4>(dim, pairs, n_chunks, q, n_q, k + j * dim, scale, scores + j, scores_stride);
  const float* k_rest = k + j * dim;
  float* s_rest = scores + j;
  switch (n_k - j) {
    case 3: scores_tile<QP, 3>(dim, pairs, n_chunks, q, n_q, k_rest, scale, s_rest, scores_stride); break;
    case 2: scores_tile<QP, 2>(dim, pairs, n_chunks, q, n_q, k_rest, scale, s_rest, scores_stride); break;
    case 1: scores_tile<QP, 1>(dim, pairs, n_chunks, q, n_q, k_rest, scale, s_rest, scores_stride); break;
    default: break;
  }
}

void scores_avx512(int64_t dim, const float* q, int64_t n_q, const float* k, int64_t n_k, float scale, float* scores,
                   int64_t scores_stride) {
  // The queries in pairs, chunk by chunk (an odd last query beside zeros).
  const int64_t n_chunks = dim / 8, n_pairs = (n_q + 1) / 2;
  float* pairs = attention_scratch(n_pairs * n_chunks * 16);
  for (int64_t p = 0; p < n_pairs; ++p) {
    for (int64_t c = 0; c < n_chunks; ++c) {
      float* to = pairs + (p * n_chunks + c) * 16;
      const __m256 first = _mm256_loadu_ps(q + 2 * p * dim + 8 * c);
      const __m256 second = 2 * p + 1 < n_q ? _mm256_loadu_ps(q + (2 * p + 1) * dim + 8 * c) : _mm256_setzero_ps();
      _mm256_storeu_ps(to, first);
      _mm256_storeu_ps(to + 8, second);
    }
  }
  constexpr int64_t k_pairs_per_tile = 4;
  for (int64_t p = 0; p < n_pairs; p += k_pairs_per_tile) {
    const float* pairs_at = pairs + p * n_chunks * 16;
    const float* q_at = q + 2 * p * dim;
    const int64_t q_left = n_q - 2 * p;
    float* s_at = scores + 2 * p * scores_stride;
    switch (std::min(k_pairs_per_tile, n_pairs - p)) {
      case 4: scores_rows<4>(dim, pairs_at, n_chunks, q_at, q_left, k, n_k, scale, s_at, scores_stride); break;
      case 3: scores_rows<3>(dim, pairs_at, n_chunks, q_at, q_left, k, n_k, scale, s_at, scores_stride); break;
      case 2: scores_rows<2>(dim, pairs_at, n_chunks, q_at, q_left, k, n_k, scale, s_at, scores_stride); break;
      default: scores_rows<1>(dim, pairs_at, n_chunks, q_at, q_left, k, n_k, scale, s_at, scores_stride); break;
    }
  }
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
  int64_t i = 0;
  for (; i + 4 <= n_q; i += 4) weighted_sum_rows<4>(dim, p + i * p_stride, p_stride, v, n_v, out + i * dim);
  const float* p_rest = p + i * p_stride;
  float* out_rest = out + i * dim;
  switch (n_q - i) {
    case 3: weighted_sum_rows<3>(dim, p_rest, p_stride, v, n_v, out_rest); break;
    case 2: weighted_sum_rows<2>(dim, p_rest, p_stride, v, n_v, out_rest); break;
    case 1: weighted_sum_rows<1>(dim, p_rest, p_stride, v, n_v, out_rest); break;
    default: break;
  }
}

}  // namespace

AttentionTileKernels attention_tile_kernels_avx512() {
  AttentionTileKernels kernels = attention_tile_kernels_avx2();
  kernels.scores = scores_avx512;
  kernels.weighted_sum = weighted_sum_avx512;
  return kernels;
}

}  // namespace ds
