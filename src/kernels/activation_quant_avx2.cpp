// Q8_0 and Q8_K quantization with AVX2, equal to the reference bit for bit:
// the same maxima, the same scale, the same products, rounded half to even as
// nearbyint does in the default rounding mode. F16 and BF16 rows round to
// nearest even as base/fp16.h does.

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "base/fp16.h"
#include "kernels/activation_quant.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

const __m256 k_abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));

inline float horizontal_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// 32 floats times `scale`, rounded, as 32 int8 in order.
inline __m256i round_to_int8(const float* x, __m256 scale) {
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), scale);
    q[i] = _mm256_cvtps_epi32(_mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));  // undo the packs' lane interleave
}

}  // namespace

void quantize_q8_0_avx2(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(out);
  for (int64_t b = 0; b < n / k_qk; ++b, x += k_qk) {
    __m256 max_abs = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) max_abs = _mm256_max_ps(max_abs, _mm256_and_ps(_mm256_loadu_ps(x + 8 * i), k_abs_mask));
    const float amax = horizontal_max(max_abs);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), round_to_int8(x, id));
    y[b].d = fp32_to_fp16(amax / 127.0f);
  }
}

// The scale comes from the signed value of largest magnitude, the first one
// where several tie (the reference keeps the first); 127 stays 127 because
// |x| <= amax bounds every product by 127.
void quantize_q8_k_avx2(const float* x, void* out, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(out);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < n / k_qk_k; ++b, x += k_qk_k) {
    __m256 max_abs = _mm256_setzero_ps();
    for (int i = 0; i < k_qk_k; i += 8) max_abs = _mm256_max_ps(max_abs, _mm256_and_ps(_mm256_loadu_ps(x + i), k_abs_mask));
    const float amax = horizontal_max(max_abs);
    if (amax == 0.0f) {
      *y = BlockQ8_K{};
      ++y;
      continue;
    }
    float max = 0.0f;
    for (int i = 0; i < k_qk_k; i += 8) {
      const __m256 at_max = _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), k_abs_mask), _mm256_set1_ps(amax), _CMP_EQ_OQ);
      const int mask = _mm256_movemask_ps(at_max);
      if (mask != 0) {
        max = x[i + __builtin_ctz(unsigned(mask))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    for (int c = 0; c < k_qk_k / 32; ++c) {
      const __m256i q = round_to_int8(x + 32 * c, _mm256_set1_ps(iscale));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y->qs + 32 * c), q);
      // Sums of four, then of sixteen: lanes 0-3 are elements 0-15, lanes 4-7 elements 16-31.
      __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
      sums = _mm256_hadd_epi32(sums, sums);
      sums = _mm256_hadd_epi32(sums, sums);
      y->bsums[2 * c] = int16_t(_mm256_extract_epi32(sums, 0));
      y->bsums[2 * c + 1] = int16_t(_mm256_extract_epi32(sums, 4));
    }
    y->d = 1.0f / iscale;
    ++y;
  }
}

float quantize_int8_row_avx2(const float* x, int8_t* out, int64_t n) {
  __m256 max_abs = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) max_abs = _mm256_max_ps(max_abs, _mm256_and_ps(_mm256_loadu_ps(x + i), k_abs_mask));
  float amax = horizontal_max(max_abs);
  for (; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  i = 0;
  for (; i + 32 <= n; i += 32) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), round_to_int8(x + i, _mm256_set1_ps(id)));
  for (; i < n; ++i) out[i] = int8_t(std::nearbyint(x[i] * id));
  return amax / 127.0f;
}

// Values past +-127 saturate in the packs (to -128 at worst), then clamp to -127 as the reference does.
void quantize_int8_row_static_avx2(const float* x, int8_t* out, int64_t n, float scale) {
  const float id = 1.0f / scale;
  const __m256 limit = _mm256_set1_ps(127.0f), neg_limit = _mm256_set1_ps(-127.0f);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    float clamped[32];
    for (int j = 0; j < 32; j += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i + j), _mm256_set1_ps(id));
      _mm256_storeu_ps(clamped + j, _mm256_min_ps(_mm256_max_ps(v, neg_limit), limit));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), round_to_int8(clamped, _mm256_set1_ps(1.0f)));
  }
  for (; i < n; ++i) out[i] = int8_t(std::clamp(std::nearbyint(x[i] * id), -127.0f, 127.0f));
}

// F16C's conversion rounds to nearest even like fp32_to_fp16, subnormals and
// overflow to infinity included; a NaN becomes the signed default NaN first,
// whose conversion is fp32_to_fp16's (it keeps no payload).
void convert_f16_avx2(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(0x80000000u)));
  const __m256 default_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    v = _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), default_nan), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

// fp32_to_bf16 on eight lanes: the top half, rounded to nearest even; a NaN's
// top half with its quiet bit set.
inline __m256i bf16_lanes(const float* x) {
  const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

void convert_bf16_avx2(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // packus keeps the 16-bit values (all below 2^16) and interleaves the halves; the permute undoes it.
    const __m256i packed = _mm256_packus_epi32(bf16_lanes(x + i), bf16_lanes(x + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
  }
  for (; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

}  // namespace ds
