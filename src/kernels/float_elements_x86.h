#pragma once
// How the float row tiles (kernels/float_rows.h) read F32, F16 and BF16
// elements and add their products, and how they finish a (row, token) sum:
// written once for the AVX2 tiles and the AVX-512 tiles, so that both add in
// one order and give the same bits. Included only by the two kernel files,
// each compiled for its ISA; everything here has internal linkage, so neither
// file's code reaches the other's callers.
//
// A step is the columns one ymm accumulator takes at a time; a tile keeps two
// accumulators per (row, token), for the even and the odd steps (AVX-512: the
// low and high halves of one zmm, a wide step being two steps).

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/hsum_avx2.h"
#include "tensor/dtype.h"

namespace ds {
namespace {

// F32 and F16: eight columns a step, one FMA per column.
struct FmaSteps {
  static constexpr int64_t k_step = 8;
  static __m256 madd(__m256 w, __m256 x, __m256 acc) { return _mm256_fmadd_ps(w, x, acc); }
#ifdef __AVX512F__
  static __m512 madd_wide(__m512 w, __m512 x, __m512 acc) { return _mm512_fmadd_ps(w, x, acc); }
  static __m512 madd_low(__m512 w, __m512 x, __m512 acc) { return _mm512_mask3_fmadd_ps(w, x, acc, 0x00ff); }
#endif
};

struct F32Elements : FmaSteps {
  static constexpr int64_t k_bytes = 4;
  static __m256 load(const uint8_t* row, int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i); }
  static float load1(const uint8_t* row, int64_t i) { return reinterpret_cast<const float*>(row)[i]; }
#ifdef __AVX512F__
  static __m512 load_wide(const uint8_t* row, int64_t i) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i); }
  static __m512 load_low(const uint8_t* row, int64_t i) { return _mm512_castps256_ps512(load(row, i)); }
#endif
};

struct F16Elements : FmaSteps {
  static constexpr int64_t k_bytes = 2;
  static __m256 load(const uint8_t* row, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + i)));
  }
  static float load1(const uint8_t* row, int64_t i) { return _cvtsh_ss(reinterpret_cast<const uint16_t*>(row)[i]); }
#ifdef __AVX512F__
  static __m512 load_wide(const uint8_t* row, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + i)));
  }
  static __m512 load_low(const uint8_t* row, int64_t i) { return _mm512_castps256_ps512(load(row, i)); }
#endif
};

// BF16: sixteen columns a step, as eight pairs (2j, 2j + 1); lane j adds the
// odd column's product, rounded, then the even one's. That is AVX512_BF16's
// vdpbf16ps, exactly for normal numbers (measured on Zen 4, as Intel's
// pseudocode writes it), which the AVX-512 tiles run where the CPU has it;
// here two FMAs on the pair's halves, a mask and a shift from the raw bits.
struct BF16Pairs {
  __m256 odd, even;
};

#ifdef __AVX512F__
struct BF16WidePairs {
  __m512 odd, even;
};
#endif

struct BF16Elements {
  static constexpr int64_t k_step = 16;
  static constexpr int64_t k_bytes = 2;
  static BF16Pairs load(const uint8_t* row, int64_t i) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + i));
    return {_mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int32_t(0xffff0000u)))),
            _mm256_castsi256_ps(_mm256_slli_epi32(v, 16))};
  }
  static __m256 madd(BF16Pairs w, BF16Pairs x, __m256 acc) {
    return _mm256_fmadd_ps(w.even, x.even, _mm256_fmadd_ps(w.odd, x.odd, acc));
  }
  static float load1(const uint8_t* row, int64_t i) {
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int32_t(reinterpret_cast<const uint16_t*>(row)[i]) << 16)));
  }
#ifdef __AVX512F__
  // Two steps: the even one's pairs in the low lanes, the odd one's in the high.
  static BF16WidePairs load_wide(const uint8_t* row, int64_t i) {
    return pairs_of(_mm512_loadu_si512(reinterpret_cast<const uint16_t*>(row) + i));
  }
  static BF16WidePairs load_low(const uint8_t* row, int64_t i) {
    return pairs_of(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + i))));
  }
  static __m512 madd_wide(BF16WidePairs w, BF16WidePairs x, __m512 acc) {
    return _mm512_fmadd_ps(w.even, x.even, _mm512_fmadd_ps(w.odd, x.odd, acc));
  }
  static __m512 madd_low(BF16WidePairs w, BF16WidePairs x, __m512 acc) {
    return _mm512_mask3_fmadd_ps(w.even, x.even, _mm512_mask3_fmadd_ps(w.odd, x.odd, acc, 0x00ff), 0x00ff);
  }
  static BF16WidePairs pairs_of(__m512i v) {
    return {_mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int32_t(0xffff0000u)))), _mm512_castsi512_ps(_mm512_slli_epi32(v, 16))};
  }
#endif
};

#ifdef __AVX512BF16__
// BF16 with vdpbf16ps: a pair's two products in one instruction, which treats
// denormal inputs as zero and flushes denormal results (the FMAs above keep
// them), so decode and prefill both run this where it runs at all.
struct BF16DotElements {
  static constexpr int64_t k_step = BF16Elements::k_step;
  static constexpr int64_t k_bytes = BF16Elements::k_bytes;
  static __m512bh load_wide(const uint8_t* row, int64_t i) {
    return reinterpret_cast<__m512bh>(_mm512_loadu_si512(reinterpret_cast<const uint16_t*>(row) + i));
  }
  static __m512bh load_low(const uint8_t* row, int64_t i) {
    return reinterpret_cast<__m512bh>(
        _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + i))));
  }
  static __m512 madd_wide(__m512bh w, __m512bh x, __m512 acc) { return _mm512_dpbf16_ps(acc, w, x); }
  static __m512 madd_low(__m512bh w, __m512bh x, __m512 acc) { return _mm512_mask_dpbf16_ps(acc, 0x00ff, w, x); }
  static float load1(const uint8_t* row, int64_t i) { return BF16Elements::load1(row, i); }
};
#endif

// A (row, token) sum from its two accumulators (the even and the odd steps
// before `tail`): added, their lanes summed by hsum, then columns [tail, n)
// one by one.
template <typename Elements>
inline float finish_row_dot(__m256 even, __m256 odd, const uint8_t* w_row, const uint8_t* x_row, int64_t tail, int64_t n) {
  float sum = hsum(_mm256_add_ps(even, odd));
  for (int64_t j = tail; j < n; ++j) sum = std::fma(Elements::load1(w_row, j), Elements::load1(x_row, j), sum);
  return sum;
}

// make(Elements{}) for the weight type's elements, BF16's being `BF16`;
// nullptr for other types.
template <typename BF16, typename Make>
auto for_float_elements(DType weight_type, Make make) -> decltype(make(F32Elements{})) {
  switch (weight_type) {
    case DType::f32: return make(F32Elements{});
    case DType::f16: return make(F16Elements{});
    case DType::bf16: return make(BF16{});
    default: return nullptr;
  }
}

}  // namespace
}  // namespace ds
