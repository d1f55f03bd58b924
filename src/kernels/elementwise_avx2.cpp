// AVX2 + FMA element-wise ops (kernels/elementwise.h); compiled with those
// flags, called only where the CPU has them.

#include <immintrin.h>

#include "kernels/elementwise.h"
#include "kernels/exp_avx2.h"

namespace ds {
namespace {

// silu(g) * u with one exponential of a non-positive number, which cannot
// overflow: e = e^-|g|, sigmoid(g) = 1 / (1 + e) for g >= 0 and e / (1 + e)
// below. Where e^g underflows (g < -87.3) the product is -0, as
// g / (1 + e^-g) gives once e^-g overflows.
inline __m256 silu_times(__m256 g, __m256 u) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 e = exp_nonpositive(_mm256_or_ps(g, sign));
  const __m256 numerator = _mm256_blendv_ps(_mm256_set1_ps(1.0f), e, g);
  return _mm256_mul_ps(_mm256_div_ps(_mm256_mul_ps(g, numerator), _mm256_add_ps(e, _mm256_set1_ps(1.0f))), u);
}

}  // namespace

void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(gate + i, silu_times(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  // The tail through the same lanes, masked: an element's bits do not depend
  // on where a thread's range of the row began.
  if (i < n) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(gate + i, mask, silu_times(_mm256_maskload_ps(gate + i, mask), _mm256_maskload_ps(up + i, mask)));
  }
}

}  // namespace ds
