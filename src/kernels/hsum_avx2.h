#pragma once
// The sum of a register's eight floats, in one fixed order (kernels that must
// agree bit for bit add their lanes the same way). Only for files compiled
// with -mavx2.

#include <immintrin.h>

namespace ds {

inline float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// Lane k = hsum(v[k]) bit for bit (the same additions in the same pairs),
// for eight registers at once: 19 operations where eight hsums take 48.
inline __m256 hsum8(const __m256 v[8]) {
  // Halves added: a register per pair (k, k + 4), lanes [s_k | s_(k+4)].
  __m256 halves[4];
  for (int k = 0; k < 4; ++k) {
    halves[k] = _mm256_add_ps(_mm256_permute2f128_ps(v[k], v[k + 4], 0x20), _mm256_permute2f128_ps(v[k], v[k + 4], 0x31));
  }
  // Lanes 0 + 2 and 1 + 3 of each s: [t_k0, t_k1, t_(k+1)0, t_(k+1)1 | the same for k + 4, k + 5].
  __m256 quarters[2];
  for (int k = 0; k < 2; ++k) {
    const __m256 a = halves[2 * k], b = halves[2 * k + 1];
    quarters[k] = _mm256_add_ps(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // t_k0 + t_k1, in order [0, 1, 2, 3 | 4, 5, 6, 7].
  return _mm256_hadd_ps(quarters[0], quarters[1]);
}

}  // namespace ds
