#pragma once
// e^x in eight lanes, for the kernels that need it in bulk (softmax, SiLU),
// and in sixteen where the including file is compiled with AVX-512 (the same
// operations per lane, so the same bits). Only for files compiled with -mavx2
// -mfma; internal linkage, so that no caller without them can reach this code.

#include <immintrin.h>

namespace ds {
namespace {

// e^x for x <= 0 (attention scores less their maximum, SiLU's e^-|x|),
// within 1e-6 relative (tested): x = n ln 2 + r with |r| <= ln 2 / 2, e^r by
// Cephes' degree-6 polynomial, and 2^n built in the exponent bits. Below
// -87.3 the result would be subnormal: 0.
namespace exp_constants {
constexpr float k_lowest = -87.3f, k_log2e = 1.44269504088896341f;
constexpr float k_ln2_high = 0.693359375f, k_ln2_low = -2.12194440e-4f;
constexpr float k_poly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                             5.0000001201e-1f};
}  // namespace exp_constants

inline __m256 exp_nonpositive(__m256 x) {
  using namespace exp_constants;
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(k_lowest), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(k_lowest));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(k_log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(k_ln2_high), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(k_ln2_low), r);
  __m256 p = _mm256_set1_ps(k_poly[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(k_poly[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_to_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(two_to_n)));
}

#ifdef __AVX512F__
inline __m512 exp_nonpositive(__m512 x) {
  using namespace exp_constants;
  const __mmask16 kept = _mm512_cmp_ps_mask(x, _mm512_set1_ps(k_lowest), _CMP_NLT_UQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(k_lowest));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(k_log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(k_ln2_high), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(k_ln2_low), r);
  __m512 p = _mm512_set1_ps(k_poly[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(k_poly[i]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i two_to_n = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(kept, p, _mm512_castsi512_ps(two_to_n));
}
#endif

}  // namespace
}  // namespace ds
