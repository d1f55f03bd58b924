#pragma once
// The K types' group blocks (interleaved_rows.h) and their codes, eight rows'
// chunk of four elements in one 32-byte register (byte 4r + i: row r's
// element 4c + i of chunk c), shared by the AVX2 tiles and the AMX ones
// (interleaved_rows_k_amx.cpp). Included only by files compiled with AVX2;
// everything here has internal linkage.

#include <immintrin.h>

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

// Q4_K and Q5_K: the unsigned codes of chunk c of sub-blocks 2 * pair (low)
// and 2 * pair + 1 (high); Q5_K's fifth bits from qh bits 2 * pair and 2 * pair + 1.
template <typename Group>
inline void k_chunk_codes(const Group& w, int pair, int c, __m256i& low, __m256i& high) {
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
  const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs[pair] + 32 * c));
  low = _mm256_and_si256(packed, low_nibbles);
  high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
  if constexpr (std::is_same_v<Group, GroupQ5_K>) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qh[c])), sixteen = _mm256_set1_epi8(0x10);
    const auto fifth = [&](__m256i bit) { return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), sixteen); };
    low = _mm256_or_si256(low, fifth(_mm256_set1_epi8(char(1 << (2 * pair)))));
    high = _mm256_or_si256(high, fifth(_mm256_set1_epi8(char(2 << (2 * pair)))));
  }
}

// Q6_K: the unsigned 6-bit codes (stored + 32) of chunks 16q + i and 16q + i
// + 1 (i even: step i / 2). Quarters 0 and 1 take the low nibbles of the
// step's low-nibble registers, quarters 2 and 3 their high ones; the top two
// bits come from the step's high-bit registers at bits 2q, 2q + 1.
inline void q6_k_chunk_codes(const GroupQ6_K& w, int i, int q, __m256i& c0, __m256i& c1) {
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F), top_bits = _mm256_set1_epi8(0x30);
  const auto reg = [&](int slot) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.steps[i / 2][slot])); };
  const auto code = [&](int slot, __m256i high) {
    const __m256i packed = reg(slot);
    const __m256i nibble = _mm256_and_si256(q < 2 ? packed : _mm256_srli_epi16(packed, 4), low_nibbles);
    const __m256i top = q == 3 ? _mm256_srli_epi16(high, 2) : _mm256_slli_epi16(high, 4 - 2 * q);
    return _mm256_or_si256(nibble, _mm256_and_si256(top, top_bits));
  };
  c0 = code(2 + 2 * (q % 2), reg(0));
  c1 = code(3 + 2 * (q % 2), reg(1));
}

}  // namespace
}  // namespace ds
