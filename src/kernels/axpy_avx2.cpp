// AVX2 + FMA + F16C axpy; compiled with those flags, called only where the CPU has them.

#include <immintrin.h>

#include "base/fp16.h"
#include "kernels/axpy.h"

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

}  // namespace

AxpyFn axpy_avx2(DType x_type) {
  switch (x_type) {
    case DType::f32: return axpy_f32;
    case DType::f16: return axpy_f16;
    default: return nullptr;
  }
}

}  // namespace ds
