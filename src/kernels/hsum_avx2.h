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

}  // namespace ds
