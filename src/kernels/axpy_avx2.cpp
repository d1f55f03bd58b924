// AVX2 + FMA + F16C axpy; compiled with those flags, called only where the CPU has them.

#include <immintrin.h>

#include "base/fp16.h"
#include "kernels/axpy.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

void axpy_f32(int64_t n, float alpha, const void* x, float* y) {
  const auto* v = static_cast<const float*>(x);
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(v + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * v[i];
}

void axpy_f16(int64_t n, float alpha, const void* x, float* y) {
  const auto* v = static_cast<const uint16_t*>(x);
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 vf = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, vf, _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * _cvtsh_ss(v[i]);
}

void axpy_q8_0(int64_t n, float alpha, const void* x, float* y) {
  const auto* blocks = static_cast<const BlockQ8_0*>(x);
  for (int64_t b = 0; b < n / k_qk; ++b, y += k_qk) {
    const __m256 scale = _mm256_set1_ps(alpha * _cvtsh_ss(blocks[b].d));
    for (int i = 0; i < k_qk; i += 8) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blocks[b].qs + i));
      const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(scale, qf, _mm256_loadu_ps(y + i)));
    }
  }
}

}  // namespace

AxpyFn axpy_avx2(DType x_type) {
  switch (x_type) {
    case DType::f32: return axpy_f32;
    case DType::f16: return axpy_f16;
    case DType::q8_0: return axpy_q8_0;
    default: return nullptr;
  }
}

}  // namespace ds
