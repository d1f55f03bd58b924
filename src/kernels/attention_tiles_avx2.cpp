// AVX2 + FMA + F16C attention tiles (kernels/attention_tiles.h); compiled
// with those flags, called only where the CPU has them.

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention_tiles.h"
#include "kernels/hsum_avx2.h"
#include "kernels/online_softmax_x86.h"
#include "kernels/tiles_of_four.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

// A register tile of NQ queries x NK keys: each loaded key chunk serves NQ
// queries and each query chunk NK keys. Per pair: one accumulator over the
// 8-element chunks, its lanes summed (all the tile's pairs at once, each as
// hsum adds them), then the scalar tail.
template <int NQ, int NK>
void scores_tile(int64_t dim, const float* q, const float* k, float scale, float* scores, int64_t scores_stride) {
  static_assert(NQ * NK <= 8, "one register of sums per tile");
  // Unrolled, as the loops below: rolled, GCC zeroes the tile with rep stos
  // and keeps weighted_sum_tile's accumulators in memory (together 1.3x on a
  // decode step over 256 cached positions, in L2).
  __m256 acc[8];
#pragma GCC unroll 8
  for (__m256& a : acc) a = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8) {
    __m256 keys[NK];
#pragma GCC unroll 8
    for (int j = 0; j < NK; ++j) keys[j] = _mm256_loadu_ps(k + j * dim + d);
#pragma GCC unroll 8
    for (int i = 0; i < NQ; ++i) {
      const __m256 query = _mm256_loadu_ps(q + i * dim + d);
#pragma GCC unroll 8
      for (int j = 0; j < NK; ++j) acc[i * NK + j] = _mm256_fmadd_ps(query, keys[j], acc[i * NK + j]);
    }
  }
  const __m256 sums8 = hsum8(acc);
  if constexpr (NQ == 4 && NK == 2) {
    if (d == dim) {  // no tail: rows 0-3 take lanes (0, 1), (2, 3), (4, 5), (6, 7), scaled as below
      const __m256 scaled = _mm256_mul_ps(sums8, _mm256_set1_ps(scale));
      const __m128 lo = _mm256_castps256_ps128(scaled), hi = _mm256_extractf128_ps(scaled, 1);
      _mm_storel_pi(reinterpret_cast<__m64*>(scores), lo);
      _mm_storeh_pi(reinterpret_cast<__m64*>(scores + scores_stride), lo);
      _mm_storel_pi(reinterpret_cast<__m64*>(scores + 2 * scores_stride), hi);
      _mm_storeh_pi(reinterpret_cast<__m64*>(scores + 3 * scores_stride), hi);
      return;
    }
  }
  alignas(32) float sums[8];
  _mm256_store_ps(sums, sums8);
  for (int i = 0; i < NQ; ++i) {
    for (int j = 0; j < NK; ++j) {
      float sum = sums[i * NK + j];
      for (int64_t e = d; e < dim; ++e) sum += q[i * dim + e] * k[j * dim + e];
      scores[i * scores_stride + j] = sum * scale;
    }
  }
}

template <int NQ>
void scores_rows(int64_t dim, const float* q, const float* k, int64_t n_k, float scale, float* scores,
                 int64_t scores_stride) {
  int64_t j = 0;
  for (; j + 2 <= n_k; j += 2) scores_tile<NQ, 2>(dim, q, k + j * dim, scale, scores + j, scores_stride);
  if (j < n_k) scores_tile<NQ, 1>(dim, q, k + j * dim, scale, scores + j, scores_stride);
}

void scores_avx2(int64_t dim, const float* q, int64_t n_q, const float* k, int64_t n_k, float scale, float* scores,
                 int64_t scores_stride) {
  for_tiles_of_four(n_q, [&](auto rows, int64_t i) {
    scores_rows<rows.value>(dim, q + i * dim, k, n_k, scale, scores + i * scores_stride, scores_stride);
  });
}

// NQ output rows x W chunks of 8 elements held in registers while every
// value row passes.
template <int NQ, int W>
void weighted_sum_tile(int64_t dim, const float* p, int64_t p_stride, const float* v, int64_t n_v, float* out) {
  __m256 acc[NQ][W];
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 8
    for (int w = 0; w < W; ++w) acc[i][w] = _mm256_loadu_ps(out + i * dim + 8 * w);
  }
  for (int64_t j = 0; j < n_v; ++j) {
    __m256 values[W];
#pragma GCC unroll 8
    for (int w = 0; w < W; ++w) values[w] = _mm256_loadu_ps(v + j * dim + 8 * w);
#pragma GCC unroll 8
    for (int i = 0; i < NQ; ++i) {
      const __m256 weight = _mm256_broadcast_ss(p + i * p_stride + j);
#pragma GCC unroll 8
      for (int w = 0; w < W; ++w) acc[i][w] = _mm256_fmadd_ps(weight, values[w], acc[i][w]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 8
    for (int w = 0; w < W; ++w) _mm256_storeu_ps(out + i * dim + 8 * w, acc[i][w]);
  }
}

template <int NQ>
void weighted_sum_rows(int64_t dim, const float* p, int64_t p_stride, const float* v, int64_t n_v, float* out) {
  int64_t d = 0;
  for (; d + 16 <= dim; d += 16) weighted_sum_tile<NQ, 2>(dim, p, p_stride, v + d, n_v, out + d);
  for (; d + 8 <= dim; d += 8) weighted_sum_tile<NQ, 1>(dim, p, p_stride, v + d, n_v, out + d);
  for (; d < dim; ++d) {
    for (int i = 0; i < NQ; ++i) {
      for (int64_t j = 0; j < n_v; ++j) out[i * dim + d] = std::fma(p[i * p_stride + j], v[j * dim + d], out[i * dim + d]);
    }
  }
}

void weighted_sum_avx2(int64_t dim, const float* p, int64_t p_stride, int64_t n_q, const float* v, int64_t n_v,
                       float* out) {
  for_tiles_of_four(n_q, [&](auto rows, int64_t i) { weighted_sum_rows<rows.value>(dim, p + i * p_stride, p_stride, v, n_v, out + i * dim); });
}

void to_f32_avx2(DType type, const void* x, float* y, int64_t n) {
  if (type != DType::f16) return dequantize_row(type, x, y, n);
  const auto* h = static_cast<const uint16_t*>(x);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  if (i < n) dequantize_row(type, h + i, y + i, n - i);
}

// F16C's conversions round as fp32_to_fp16 does: the portable bits.
void round_to_cache_avx2(DType type, const float* x, float* y, int64_t n) {
  if (type != DType::f16) return round_to_cache_portable(type, x, y, n);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  }
  if (i < n) round_to_cache_portable(type, x + i, y + i, n - i);
}

float online_softmax_avx2(float* x, int64_t n, float* max, float* sum) { return online_softmax_x86<NoPrefix>(x, n, max, sum); }

}  // namespace

AttentionTileKernels attention_tile_kernels_avx2() {
  return {scores_avx2, weighted_sum_avx2, to_f32_avx2, round_to_cache_avx2, online_softmax_avx2};
}

}  // namespace ds
