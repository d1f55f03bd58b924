#pragma once
// Two 8-row groups of interleaved rows (interleaved_rows.h) side by side in
// 512-bit registers, the first group's rows in the low half: what the pair
// kernels share (interleaved_rows_avx512.cpp for the 32-code block types,
// interleaved_rows_k_avx512.cpp for the K types). Included only by files
// compiled with AVX-512F/BW/VL and AVX512_VNNI; everything here has internal
// linkage.
//
// Why 512 bits: where AVX-512 runs its integer multiplies on two ports
// (Sapphire Rapids-class Xeons: vpdpbusd on zmm two a cycle, measured, the
// same count as on ymm), a zmm register does twice a ymm's products.

#include <immintrin.h>

#include <cstring>

#include "kernels/interleaved_rows.h"

namespace ds {
namespace {

// Tokens per register tile: each token holds two or three accumulators of the 32 registers.
constexpr int k_pair_tile_tokens = 8;

// The 32 bytes at `offset` of two group blocks, as one register.
inline auto two_groups(const uint8_t* a, const uint8_t* b) {
  return [a, b](size_t offset) {
    const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + offset));
    return _mm512_inserti64x4(_mm512_castsi256_si512(low), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + offset)), 1);
  };
}

inline __m512i join(__m256i low, __m256i high) { return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1); }

// Eight f16 of each group as sixteen floats.
inline __m512 join_f16(const uint16_t* a, const uint16_t* b) {
  const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(low), _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1));
}

// A token's four codes at qs, in every lane.
inline __m512i broadcast_codes(const int8_t* qs) {
  int32_t v;
  std::memcpy(&v, qs, 4);
  return _mm512_set1_epi32(v);
}

}  // namespace
}  // namespace ds
