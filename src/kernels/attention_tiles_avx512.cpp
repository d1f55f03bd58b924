// AVX-512 attention tiles (kernels/attention_tiles.h) with the AVX2 tiles'
// bits, for long prompts, where attention is most of a step.
//
// Scores: the AVX2 tile adds each (query, key) pair's products in eight lanes
// (lane l: elements l, l + 8, ...) and then sums the lanes in hsum's fixed
// pairs. Here the lanes are registers instead: a tile of 16 keys is transposed
// once per call, so that a register holds one element of 16 keys, and each
// query element, broadcast, meets them in one FMA into that element's lane
// register; the eight lane registers are then added in hsum's pairs, 16 pairs
// at once, with no horizontal sums. For a few queries the transposition does
// not pay: two queries then share a zmm against one key, each half a lane
// register of the AVX2 tile's, and hsum8 sums the halves.
//
// The weighted sum is elementwise, so 16 elements a register add what 8 did.
// The online softmax takes its exponentials 16 at a time (the same operations
// per element) and adds them into the same eight running lanes in the same
// order. The cache conversions are the AVX2 kernels'. Compiled with -mavx512f
// (and AVX2, FMA, F16C); called only where use_vnni_kernels().

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention_tiles.h"
#include "kernels/hsum_avx2.h"
#include "kernels/online_softmax_x86.h"
#include "kernels/tiles_of_four.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a variable
// initialised from itself, and warn about it at every inlining site.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ds {
namespace {

inline __m256 upper_half(__m512 x) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)); }

// The AVX2 tile's last step for one pair: the lanes' sum, plus the products
// of the elements past the last whole chunk of 8 one by one, times scale.
inline float finish_score(float lanes_sum, int64_t dim, const float* q, const float* k, float scale) {
  for (int64_t e = dim / 8 * 8; e < dim; ++e) lanes_sum += q[e] * k[e];
  return lanes_sum * scale;
}

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
      batch[n] = at % 2 ? upper_half(a) : _mm512_castps512_ps256(a);
    }
    _mm256_store_ps(sums + start, hsum8(batch));
  }
  for (int p = 0; p < QP; ++p) {
    for (int h = 0; h < 2 && 2 * p + h < n_q; ++h) {
      const int64_t i = 2 * p + h;
      for (int j = 0; j < NK; ++j) scores[i * scores_stride + j] = finish_score(sums[(p * NK + j) * 2 + h], dim, q + i * dim, k + j * dim, scale);
    }
  }
}

void scores_of_pairs(int64_t dim, const float* q, int64_t n_q, const float* k, int64_t n_k, float scale, float* scores,
                     int64_t scores_stride) {
  for_tiles_of_four((n_q + 1) / 2, [&](auto pairs, int64_t p) {
    for_tiles_of_four(n_k, [&](auto keys, int64_t j) {
      scores_tile<pairs.value, keys.value>(dim, q + 2 * p * dim, n_q - 2 * p, k + j * dim, scale, scores + 2 * p * scores_stride + j,
                                           scores_stride);
    });
  });
}

constexpr int k_key_columns = 16;  // keys side by side in a register

// Columns where the pairs' horizontal sums cost more than transposing the
// keys: from four queries, on short rows. Per FMA the columns load 4/3 times
// (a broadcast per product, a key register per three) and the pairs 3/4 plus
// a quarter shuffle, so long rows, where the sums are few, go to the pairs
// (backend-ops perf, 2 threads, paged attention's query blocks then of 4
// tokens: 512 x 512 prefill of heads of 64 9.9 ms on columns against 12.4 on
// pairs, MLA's expanded prefill, rows of 192, 134 against 137; latent decode,
// rows of 576, 16.2 against 12.8).
constexpr int64_t k_queries_for_columns = 4, k_longest_rows_for_columns = 256;

// The 16 x 16 floats of r (row i: register i) transposed in place: register c
// becomes column c, lane i row i's element c.
inline void transpose_16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {  // lane k of 128 bits: rows i, i + 1 at columns 4k, 4k + 1 (lo) and 4k + 2, 4k + 3 (hi)
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  __m512d u[16];  // u[4g + m], lane k: column 4k + m of rows 4g..4g + 3
  for (int g = 0; g < 4; ++g) {
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 1]), d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_unpacklo_pd(a, b), u[4 * g + 1] = _mm512_unpackhi_pd(a, b);
    u[4 * g + 2] = _mm512_unpacklo_pd(c, d), u[4 * g + 3] = _mm512_unpackhi_pd(c, d);
  }
  for (int m = 0; m < 4; ++m) {  // the 4 x 4 lanes of 128 bits: column 4k + m takes lane k of u[m], u[4 + m], u[8 + m], u[12 + m]
    const __m512 g0 = _mm512_castpd_ps(u[m]), g1 = _mm512_castpd_ps(u[4 + m]);
    const __m512 g2 = _mm512_castpd_ps(u[8 + m]), g3 = _mm512_castpd_ps(u[12 + m]);
    const __m512 low01 = _mm512_shuffle_f32x4(g0, g1, 0x44), high01 = _mm512_shuffle_f32x4(g0, g1, 0xEE);
    const __m512 low23 = _mm512_shuffle_f32x4(g2, g3, 0x44), high23 = _mm512_shuffle_f32x4(g2, g3, 0xEE);
    r[m] = _mm512_shuffle_f32x4(low01, low23, 0x88);
    r[4 + m] = _mm512_shuffle_f32x4(low01, low23, 0xDD);
    r[8 + m] = _mm512_shuffle_f32x4(high01, high23, 0x88);
    r[12 + m] = _mm512_shuffle_f32x4(high01, high23, 0xDD);
  }
}

// Elements [0, dim / 8 * 8) of up to 16 keys as columns: kt[e * 16 + j] =
// k[j * dim + e], keys past n_k 0.
void transpose_keys(int64_t dim, const float* k, int64_t n_k, float* kt) {
  const int64_t d8 = dim / 8 * 8, d16 = dim / 16 * 16;
  for (int64_t e = 0; e < d16; e += 16) {
    __m512 r[16];
    for (int j = 0; j < 16; ++j) r[j] = j < n_k ? _mm512_loadu_ps(k + j * dim + e) : _mm512_setzero_ps();
    transpose_16x16(r);
    for (int c = 0; c < 16; ++c) _mm512_storeu_ps(kt + (e + c) * k_key_columns, r[c]);
  }
  for (int64_t e = d16; e < d8; ++e) {
    for (int j = 0; j < k_key_columns; ++j) kt[e * k_key_columns + j] = j < n_k ? k[j * dim + e] : 0.0f;
  }
}

// NQ queries against the (up to) 16 transposed keys: lane[i][l] adds query
// i's products at elements l, l + 8, ... for all keys at once, as lane l of
// the AVX2 tile's accumulator adds them for one key.
template <int NQ>
void scores_of_columns(int64_t dim, const float* q, const float* kt, const float* k, int64_t n_k, float scale, float* scores,
                       int64_t scores_stride) {
  const int64_t d8 = dim / 8 * 8;
  __m512 lane[NQ][8];
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) lane[i][l] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < d8; c += 8) {
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      __m512 keys = _mm512_loadu_ps(kt + (c + l) * k_key_columns);
      // Held in a register for the NQ products: left to itself GCC folds the
      // load into each FMA, two loads per product (the broadcast's and this).
      asm("" : "+v"(keys));
#pragma GCC unroll 8
      for (int i = 0; i < NQ; ++i) lane[i][l] = _mm512_fmadd_ps(_mm512_set1_ps(q[i * dim + c + l]), keys, lane[i][l]);
    }
  }
  const __mmask16 valid = __mmask16((1u << n_k) - 1);
#pragma GCC unroll 8
  for (int i = 0; i < NQ; ++i) {
    // hsum's pairs: ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7))
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(lane[i][0], lane[i][4]), _mm512_add_ps(lane[i][2], lane[i][6])),
                                     _mm512_add_ps(_mm512_add_ps(lane[i][1], lane[i][5]), _mm512_add_ps(lane[i][3], lane[i][7])));
    float* row = scores + i * scores_stride;
    if (d8 == dim) {
      _mm512_mask_storeu_ps(row, valid, _mm512_mul_ps(sum, _mm512_set1_ps(scale)));
      continue;
    }
    alignas(64) float sums[k_key_columns];
    _mm512_store_ps(sums, sum);
    for (int64_t j = 0; j < n_k; ++j) row[j] = finish_score(sums[j], dim, q + i * dim, k + j * dim, scale);
  }
}

void scores_of_columns(int64_t dim, const float* q, int64_t n_q, const float* k, int64_t n_k, float scale, float* scores,
                       int64_t scores_stride) {
  alignas(64) float columns[k_longest_rows_for_columns * k_key_columns];  // dim <= k_longest_rows_for_columns: scores_avx512's choice
  for (int64_t j = 0; j < n_k; j += k_key_columns) {
    const int64_t keys = std::min<int64_t>(k_key_columns, n_k - j);
    transpose_keys(dim, k + j * dim, keys, columns);
    int64_t i = 0;
    const auto rows = [&](auto n_rows) {
      scores_of_columns<n_rows.value>(dim, q + i * dim, columns, k + j * dim, keys, scale, scores + i * scores_stride + j,
                                      scores_stride);
      i += n_rows.value;
    };
    while (i + 3 <= n_q) rows(std::integral_constant<int, 3>{});
    if (n_q - i == 2) rows(std::integral_constant<int, 2>{});
    if (n_q - i == 1) rows(std::integral_constant<int, 1>{});
  }
}

void scores_avx512(int64_t dim, const float* q, int64_t n_q, const float* k, int64_t n_k, float scale, float* scores,
                   int64_t scores_stride) {
  if (n_q >= k_queries_for_columns && dim <= k_longest_rows_for_columns) scores_of_columns(dim, q, n_q, k, n_k, scale, scores, scores_stride);
  else scores_of_pairs(dim, q, n_q, k, n_k, scale, scores, scores_stride);
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

// The softmax's prefix of whole 16-element chunks (online_softmax_x86.h).
struct ZmmPrefix {
  static int64_t max(const float* x, int64_t n, __m256& max8) {
    const int64_t n16 = n / 16 * 16;
    __m512 max16 = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(max8)));
    for (int64_t i = 0; i < n16; i += 16) max16 = _mm512_max_ps(max16, _mm512_loadu_ps(x + i));
    max8 = _mm256_max_ps(_mm512_castps512_ps256(max16), upper_half(max16));
    return n16;
  }
  static int64_t exp(float* x, int64_t n, __m256 shift, __m256& sum8) {
    const int64_t n16 = n / 16 * 16;
    const __m512 shift16 = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(shift)));
    for (int64_t i = 0; i < n16; i += 16) {
      const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + i), shift16));
      _mm512_storeu_ps(x + i, e);
      sum8 = _mm256_add_ps(sum8, _mm512_castps512_ps256(e));
      sum8 = _mm256_add_ps(sum8, upper_half(e));
    }
    return n16;
  }
};

float online_softmax_avx512(float* x, int64_t n, float* max, float* sum) { return online_softmax_x86<ZmmPrefix>(x, n, max, sum); }

}  // namespace

AttentionTileKernels attention_tile_kernels_avx512() {
  AttentionTileKernels kernels = attention_tile_kernels_avx2();
  kernels.scores = scores_avx512;
  kernels.weighted_sum = weighted_sum_avx512;
  kernels.online_softmax = online_softmax_avx512;
  return kernels;
}

}  // namespace ds
