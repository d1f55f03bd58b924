#pragma once
// How the float row tiles (kernels/float_rows.h) read F32, F16 and BF16
// elements as f32, and how they finish a (row, token) sum: written once for
// the AVX2 tiles and the AVX-512 tiles, so that both add in one order and give
// the same bits. Included only by the two kernel files, each compiled for its
// ISA; everything here has internal linkage, so neither file's code reaches
// the other's callers.

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/hsum_avx2.h"
#include "tensor/dtype.h"

namespace ds {
namespace {

struct F32Elements {
  static __m256 load8(const uint8_t* row, int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i); }
  static float load1(const uint8_t* row, int64_t i) { return reinterpret_cast<const float*>(row)[i]; }
#ifdef __AVX512F__
  static __m512 load16(const uint8_t* row, int64_t i) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i); }
#endif
};

struct F16Elements {
  static __m256 load8(const uint8_t* row, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + i)));
  }
  static float load1(const uint8_t* row, int64_t i) { return _cvtsh_ss(reinterpret_cast<const uint16_t*>(row)[i]); }
#ifdef __AVX512F__
  static __m512 load16(const uint8_t* row, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + i)));
  }
#endif
};

struct BF16Elements {
  static __m256 load8(const uint8_t* row, int64_t i) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float load1(const uint8_t* row, int64_t i) {
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int32_t(reinterpret_cast<const uint16_t*>(row)[i]) << 16)));
  }
#ifdef __AVX512F__
  static __m512 load16(const uint8_t* row, int64_t i) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
#endif
};

// A (row, token) sum from its two accumulators (the even and the odd groups
// of eight columns before `tail`): added, their lanes summed by hsum, then
// columns [tail, n) one by one.
template <typename Elements>
inline float finish_row_dot(__m256 even, __m256 odd, const uint8_t* w_row, const uint8_t* x_row, int64_t tail, int64_t n) {
  float sum = hsum(_mm256_add_ps(even, odd));
  for (int64_t j = tail; j < n; ++j) sum = std::fma(Elements::load1(w_row, j), Elements::load1(x_row, j), sum);
  return sum;
}

// make(Elements{}) for the weight type's elements; nullptr for other types.
template <typename Make>
auto for_float_elements(DType weight_type, Make make) -> decltype(make(F32Elements{})) {
  switch (weight_type) {
    case DType::f32: return make(F32Elements{});
    case DType::f16: return make(F16Elements{});
    case DType::bf16: return make(BF16Elements{});
    default: return nullptr;
  }
}

}  // namespace
}  // namespace ds
