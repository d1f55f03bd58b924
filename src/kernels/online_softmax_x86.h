#pragma once
// The online softmax step (attention_tiles.h's OnlineSoftmaxFn) of the x86
// tile sets. The exponentials are summed in eight running lanes (lane l:
// elements l, l + 8, ... in order), the lanes by hsum, then the n % 8 last
// elements one by one. A wider set takes a prefix of whole 16-element chunks
// through its Prefix: the same operations per element, each chunk's halves
// added into the eight lanes in order, so every set gives the same bits.
// Internal linkage; only for files compiled with -mavx2 -mfma.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/exp_avx2.h"
#include "kernels/hsum_avx2.h"

namespace ds {
namespace {

// A Prefix has
//   static int64_t max(const float* x, int64_t n, __m256& max8): folds a
//     prefix of x[0, n) into max8 and returns its length, a multiple of 8;
//   static int64_t exp(float* x, int64_t n, __m256 shift, __m256& sum8):
//     x[i] = e^(x[i] - shift) over such a prefix, each 8-element chunk added
//     into sum8 in order, and returns its length.
struct NoPrefix {
  static int64_t max(const float*, int64_t, __m256&) { return 0; }
  static int64_t exp(float*, int64_t, __m256, __m256&) { return 0; }
};

// The largest of init and x[0..n).
template <typename Prefix>
float row_max(const float* x, int64_t n, float init) {
  const int64_t n8 = n / 8 * 8;
  __m256 max8 = _mm256_set1_ps(init);
  for (int64_t i = Prefix::max(x, n8, max8); i < n8; i += 8) max8 = _mm256_max_ps(max8, _mm256_loadu_ps(x + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, max8);
  float max = init;
  for (float lane : lanes) max = std::max(max, lane);
  for (int64_t i = n8; i < n; ++i) max = std::max(max, x[i]);
  return max;
}

// x[i] = exp(x[i] - max) in place; returns their sum. The tail (n % 8) goes
// through lane arithmetic too, masked, so every element takes the same exp.
template <typename Prefix>
float exp_in_place(float* x, int64_t n, float max) {
  const int64_t n8 = n / 8 * 8;
  const __m256 shift = _mm256_set1_ps(max);
  __m256 sum8 = _mm256_setzero_ps();
  for (int64_t i = Prefix::exp(x, n8, shift, sum8); i < n8; i += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), shift));
    _mm256_storeu_ps(x + i, e);
    sum8 = _mm256_add_ps(sum8, e);
  }
  float sum = hsum(sum8);
  if (n8 < n) {
    alignas(32) float tail[8];
    for (int i = 0; i < 8; ++i) tail[i] = n8 + i < n ? x[n8 + i] - max : -INFINITY;
    _mm256_store_ps(tail, exp_nonpositive(_mm256_load_ps(tail)));
    for (int64_t i = n8; i < n; ++i) {
      x[i] = tail[i - n8];
      sum += x[i];
    }
  }
  return sum;
}

template <typename Prefix>
float online_softmax_x86(float* x, int64_t n, float* max, float* sum) {
  if (n == 0) return 1.0f;
  const float new_max = row_max<Prefix>(x, n, *max);
  const float correction = *max == -INFINITY ? 0.0f : std::exp(*max - new_max);
  *sum = *sum * correction + exp_in_place<Prefix>(x, n, new_max);
  *max = new_max;
  return correction;
}

}  // namespace
}  // namespace ds
