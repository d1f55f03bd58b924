// Q8_0 quantization with AVX2, equal to the reference bit for bit: the same
// max, the same 127 / amax, the same products, rounded half to even as
// nearbyint does in the default rounding mode.

#include <immintrin.h>

#include "base/fp16.h"
#include "kernels/activation_quant.h"
#include "tensor/quant_blocks.h"

namespace ds {

void quantize_q8_0_avx2(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(out);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undoes the packs' lane interleave
  for (int64_t b = 0; b < n / k_qk; ++b, x += k_qk) {
    __m256 v[4];
    __m256 max_abs = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      max_abs = _mm256_max_ps(max_abs, _mm256_and_ps(v[i], abs_mask));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(max_abs), _mm256_extractf128_ps(max_abs, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float amax = _mm_cvtss_f32(m);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    const __m256i q16 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), _mm256_permutevar8x32_epi32(q16, unshuffle));
    y[b].d = fp32_to_fp16(amax / 127.0f);
  }
}

}  // namespace ds
