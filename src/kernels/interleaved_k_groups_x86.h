#pragma once
// The K types' group blocks (interleaved_rows.h) and their codes, eight rows'
// chunk of four elements in one 32-byte register (byte 4r + i: row r's
// element 4c + i of chunk c), shared by the AVX2 tiles and the AMX ones
// (interleaved_rows_k_amx.cpp). Included only by files compiled with AVX2;
// everything here has internal linkage.

#include <immintrin.h>

#include <cstddef>
#include <type_traits>

#include "kernels/interleaved_rows.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

struct GroupQ4_K {
  uint16_t d[k_interleave], dmin[k_interleave];
  uint8_t scales[k_scale_bytes_k][k_interleave];  // [byte][row]
  uint8_t qs[4][k_interleave * 32];  // per pair of sub-blocks
};
struct GroupQ5_K {
  uint16_t d[k_interleave], dmin[k_interleave];
  uint8_t scales[k_scale_bytes_k][k_interleave];
  uint8_t qh[8][k_interleave * 4];  // per chunk c: the rows' qh bytes 4c..4c+3
  uint8_t qs[4][k_interleave * 32];
};
struct GroupQ6_K {
  uint16_t d[k_interleave];
  int8_t scales[16][k_interleave];  // [sub-block][row]
  // Step s: the high-bit registers 2s and 2s + 1 (chunk i + 16q's top two bits
  // at bits 2q, 2q + 1), then the low-nibble registers 2s, 2s + 1, 16 + 2s and
  // 17 + 2s (chunk i's low nibbles, and chunk i + 32's high ones).
  uint8_t steps[8][6][k_interleave * 4];
};
static_assert(sizeof(GroupQ4_K) == 8 * sizeof(BlockQ4_K) && sizeof(GroupQ5_K) == 8 * sizeof(BlockQ5_K) &&
                  sizeof(GroupQ6_K) == 8 * sizeof(BlockQ6_K),
              "a group block holds eight row blocks");

// The rows' 6-bit scales and mins of one super-block, unpacked once for all
// tokens: int16 lanes 2r and 2r + 1 belong to row r (its scale of a
// sub-block; its mins of sub-blocks 2s and 2s + 1). The packed bytes are
// stored transposed, so k_scales_mins' formula runs on all eight rows at once,
// two of its bytes per 128-bit register.
struct KScales {
  __m256i scales[8];
  __m256i mins[4];
  explicit KScales(const uint8_t (&packed)[k_scale_bytes_k][k_interleave]) {
    const auto bytes = [&](int j) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed[j])); };
    const __m128i low6 = _mm_set1_epi8(0x3F), low4 = _mm_set1_epi8(0x0F), top2 = _mm_set1_epi8(0x30);
    const __m128i q01 = bytes(0), q23 = bytes(2), q45 = bytes(4), q67 = bytes(6), q89 = bytes(8), q1011 = bytes(10);
    // Bytes 0-7: sub-block 2k of rows 0..7, bytes 8-15: sub-block 2k + 1.
    const __m128i scale_pairs[4] = {
        _mm_and_si128(q01, low6), _mm_and_si128(q23, low6),
        _mm_or_si128(_mm_and_si128(q89, low4), _mm_and_si128(_mm_srli_epi16(q01, 2), top2)),
        _mm_or_si128(_mm_and_si128(q1011, low4), _mm_and_si128(_mm_srli_epi16(q23, 2), top2))};
    const __m128i min_pairs[4] = {
        _mm_and_si128(q45, low6), _mm_and_si128(q67, low6),
        _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q89, 4), low4), _mm_and_si128(_mm_srli_epi16(q45, 2), top2)),
        _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q1011, 4), low4), _mm_and_si128(_mm_srli_epi16(q67, 2), top2))};
    for (int k = 0; k < 4; ++k) {
      scales[2 * k] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(scale_pairs[k], scale_pairs[k]));
      scales[2 * k + 1] = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scale_pairs[k], scale_pairs[k]));
      mins[k] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(min_pairs[k], _mm_srli_si128(min_pairs[k], 8)));
    }
  }
};

// The rows' sub-block scales of one super-block, widened once for all tokens:
// scales[s] has int16 lanes 2r and 2r + 1 = row r's scale of sub-block s;
// pairs[p] has lane 2r = row r's scale of sub-block 2p, 2r + 1 of 2p + 1.
struct Q6KScales {
  __m256i scales[16];
  __m256i pairs[8];
  explicit Q6KScales(const GroupQ6_K& w) {
    for (int s = 0; s < 16; ++s) {
      const __m128i rows = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales[s]));
      scales[s] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(rows, rows));
    }
    for (int p = 0; p < 8; ++p) {
      const __m128i even = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales[2 * p]));
      const __m128i odd = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales[2 * p + 1]));
      pairs[p] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(even, odd));
    }
  }
};

// Byte-wise operations on one group's 32 bytes (__m256i) or, in a file
// compiled with AVX-512BW, two groups' side by side (__m512i, the first
// group's in the low half): the decoding below is written once for both.
// Bytes<register size>.
template <size_t Size>
struct Bytes;
template <>
struct Bytes<32> {
  static __m256i splat(char v) { return _mm256_set1_epi8(v); }
  static __m256i and_(__m256i a, __m256i b) { return _mm256_and_si256(a, b); }
  static __m256i or_(__m256i a, __m256i b) { return _mm256_or_si256(a, b); }
  static __m256i shift_right16(__m256i a, int n) { return _mm256_srli_epi16(a, n); }
  static __m256i shift_left16(__m256i a, int n) { return _mm256_slli_epi16(a, n); }
  // value's bytes where x has bit's bit, 0 elsewhere.
  static __m256i where_bit(__m256i x, __m256i bit, __m256i value) {
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(x, bit), bit), value);
  }
};
#ifdef __AVX512BW__
template <>
struct Bytes<64> {
  static __m512i splat(char v) { return _mm512_set1_epi8(v); }
  static __m512i and_(__m512i a, __m512i b) { return _mm512_and_si512(a, b); }
  static __m512i or_(__m512i a, __m512i b) { return _mm512_or_si512(a, b); }
  static __m512i shift_right16(__m512i a, int n) { return _mm512_srli_epi16(a, unsigned(n)); }
  static __m512i shift_left16(__m512i a, int n) { return _mm512_slli_epi16(a, unsigned(n)); }
  static __m512i where_bit(__m512i x, __m512i bit, __m512i value) { return _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(x, bit), value); }
};
#endif

// Loads the 32 bytes at a byte offset into one group block.
template <typename Group>
inline auto one_group(const Group& w) {
  return [&w](size_t offset) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint8_t*>(&w) + offset)); };
}

// Q4_K and Q5_K: the unsigned codes of chunk c of sub-blocks 2 * pair (low)
// and 2 * pair + 1 (high); Q5_K's fifth bits from qh bits 2 * pair and 2 * pair + 1.
// load(offset): the register of the bytes at that offset into the group block(s).
template <typename Group, typename Load, typename R>
inline void k_chunk_codes(Load load, int pair, int c, R& low, R& high) {
  using B = Bytes<sizeof(R)>;
  const R low_nibbles = B::splat(0x0F);
  const R packed = load(offsetof(Group, qs) + size_t(k_interleave * 32 * pair + 32 * c));
  low = B::and_(packed, low_nibbles);
  high = B::and_(B::shift_right16(packed, 4), low_nibbles);
  if constexpr (std::is_same_v<Group, GroupQ5_K>) {
    const R qh = load(offsetof(Group, qh) + size_t(32 * c)), sixteen = B::splat(0x10);
    low = B::or_(low, B::where_bit(qh, B::splat(char(1 << (2 * pair))), sixteen));
    high = B::or_(high, B::where_bit(qh, B::splat(char(2 << (2 * pair))), sixteen));
  }
}

template <typename Group>
inline void k_chunk_codes(const Group& w, int pair, int c, __m256i& low, __m256i& high) {
  k_chunk_codes<Group>(one_group(w), pair, c, low, high);
}

// Q6_K: the unsigned 6-bit codes (stored + 32) of chunks 16q + i and 16q + i
// + 1 (i even: step i / 2). Quarters 0 and 1 take the low nibbles of the
// step's low-nibble registers, quarters 2 and 3 their high ones; the top two
// bits come from the step's high-bit registers at bits 2q, 2q + 1.
template <typename Load, typename R>
inline void q6_k_chunk_codes(Load load, int i, int q, R& c0, R& c1) {
  using B = Bytes<sizeof(R)>;
  const R low_nibbles = B::splat(0x0F), top_bits = B::splat(0x30);
  const auto reg = [&](int slot) { return load(offsetof(GroupQ6_K, steps) + size_t(6 * 32 * (i / 2) + 32 * slot)); };
  const auto code = [&](int slot, R high) {
    const R packed = reg(slot);
    const R nibble = B::and_(q < 2 ? packed : B::shift_right16(packed, 4), low_nibbles);
    const R top = q == 3 ? B::shift_right16(high, 2) : B::shift_left16(high, 4 - 2 * q);
    return B::or_(nibble, B::and_(top, top_bits));
  };
  c0 = code(2 + 2 * (q % 2), reg(0));
  c1 = code(3 + 2 * (q % 2), reg(1));
}

inline void q6_k_chunk_codes(const GroupQ6_K& w, int i, int q, __m256i& c0, __m256i& c1) { q6_k_chunk_codes(one_group(w), i, q, c0, c1); }

}  // namespace
}  // namespace ds
