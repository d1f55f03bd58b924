// The pair kernels of Q8_0, Q4_0 and I8 on AVX-512 (interleaved_rows.h): two
// 8-row groups side by side in 512-bit registers (interleaved_pairs_x86.h)
// against tiles of up to eight tokens, bit for bit the VNNI group kernels'
// outputs (tested).
//
// A block's products go into int32 lanes through dpbusd, in two chains (its
// first and second halves: 2T chains hide the instruction's latency), each
// lane exact; the chains start from the block's correction (Q8_0 and I8: -128 x
// the row's weight sum, for the biased activation codes; Q4_0: -8 x the
// token's code sum, for the unsigned weight codes), so their sum is the
// block's exact dot product, as the VNNI kernel's. Its float part, (row
// scale x token scale) x sum added into one accumulator per output, blocks in
// order, is that kernel's operation for operation.
//
// Compiled with AVX-512F/BW/VL and AVX512_VNNI; only called where
// interleaved_pair_kernel() hands it out.

#include <immintrin.h>

#include <type_traits>

// GCC 12 flags the undefined pass-through operand inside its own AVX-512
// intrinsics (_mm512_undefined_*) as uninitialized: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/interleaved_pairs_x86.h"
#include "kernels/interleaved_tiles_x86.h"

namespace ds {
namespace {

using PairQ8_0 = GroupQ8_0<k_interleave>;
using PairI8 = GroupI8<k_interleave>;
template <typename Group>
constexpr bool k_int8_codes = std::is_same_v<Group, PairQ8_0> || std::is_same_v<Group, PairI8>;

// Q8_0 and I8: -128 x each row's weight sum of every block (the biased
// codes' a + 128 meet the signed weights; this takes the 128 back out), once
// for all tiles of tokens, in the calling thread's scratch.
template <typename Group>
const __m512i* weight_biases(int64_t n_blocks, const Group* wa, const Group* wb) {
  auto* biases = reinterpret_cast<__m512i*>(interleaved_scratch(size_t(n_blocks) * sizeof(__m512i)));
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto load = two_groups(reinterpret_cast<const uint8_t*>(wa + b), reinterpret_cast<const uint8_t*>(wb + b));
    __m512i sums = _mm512_setzero_si512();
    for (int c = 0; c < 8; ++c) sums = _mm512_dpbusd_epi32(sums, ones, load(offsetof(Group, qs) + size_t(32 * c)));
    _mm512_storeu_si512(biases + b, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, 7)));
  }
  return biases;
}

// I8 has no float part: each (row, token) sums every block in its int32
// lanes (exact: rows are at most k_max_i8_cols long), written as a float.
template <int T, typename Group>
void pair_tile(int64_t n_blocks, const Group* wa, const Group* wb, const __m512i* biases, const PairActivations& act, float* out,
               int64_t out_stride) {
  constexpr bool k_i8 = std::is_same_v<Group, PairI8>;
  const auto codes_of = [&](int j, int64_t b) {
    if constexpr (k_i8) return reinterpret_cast<const int8_t*>(act.rows + j * act.row_stride) + b * k_qk;
    else return act_block(act.rows, act.row_stride, j, b).qs;
  };
  __m512 acc[T];
  __m512i totals[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_ps(), totals[j] = _mm512_setzero_si512();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto load = two_groups(reinterpret_cast<const uint8_t*>(wa + b), reinterpret_cast<const uint8_t*>(wb + b));
    __m512i first[T], second[T];
    if constexpr (k_int8_codes<Group>) {
      const __m512i bias = _mm512_loadu_si512(biases + b);
      for (int j = 0; j < T; ++j) first[j] = k_i8 ? _mm512_add_epi32(totals[j], bias) : bias, second[j] = _mm512_setzero_si512();
      // Unrolled: rolled, GCC copies the dpbusd accumulators between registers every iteration.
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m512i w_first = load(offsetof(Group, qs) + size_t(32 * c)), w_second = load(offsetof(Group, qs) + size_t(32 * (c + 4)));
        for (int j = 0; j < T; ++j) {
          first[j] = _mm512_dpbusd_epi32(first[j], broadcast_codes(codes_of(j, b) + 4 * c), w_first);
          second[j] = _mm512_dpbusd_epi32(second[j], broadcast_codes(codes_of(j, b) + 4 * (c + 4)), w_second);
        }
      }
    } else {
      for (int j = 0; j < T; ++j) {
        first[j] = _mm512_set1_epi32(-Group::k_offset * act.block_sums[j * n_blocks + b]);
        second[j] = _mm512_setzero_si512();
      }
      const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        // Byte 32v + 4r + i: row r's element 4v + i (low nibble) and 16 + 4v + i (high).
        const __m512i packed = load(offsetof(Group, qs) + size_t(32 * v));
        const __m512i low = _mm512_and_si512(packed, low_nibbles), high = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibbles);
        for (int j = 0; j < T; ++j) {
          first[j] = _mm512_dpbusd_epi32(first[j], low, broadcast_codes(codes_of(j, b) + 4 * v));
          second[j] = _mm512_dpbusd_epi32(second[j], high, broadcast_codes(codes_of(j, b) + 16 + 4 * v));
        }
      }
    }
    if constexpr (k_i8) {
      for (int j = 0; j < T; ++j) totals[j] = _mm512_add_epi32(first[j], second[j]);
    } else {
      const __m512 row_scales = join_f16(wa[b].d, wb[b].d);
      const float* token_scales = act.block_scales + b * act.scale_stride;
      for (int j = 0; j < T; ++j) {
        const __m512 scale = _mm512_mul_ps(row_scales, _mm512_set1_ps(token_scales[j]));
        acc[j] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(_mm512_add_epi32(first[j], second[j])), acc[j]);
      }
    }
  }
  for (int j = 0; j < T; ++j) _mm512_storeu_ps(out + j * out_stride, k_i8 ? _mm512_cvtepi32_ps(totals[j]) : acc[j]);
}

// Tiles of tokens outer, blocks inner: a tile's accumulators stay in
// registers while the pair's weights (16 rows) pass from L1/L2.
template <typename Group>
void pair_blocks(int64_t n_blocks, const uint8_t* groups, int64_t group_bytes, const PairActivations& act, int64_t n_tokens, float* out,
                 int64_t out_stride) {
  const auto* wa = reinterpret_cast<const Group*>(groups);
  const auto* wb = reinterpret_cast<const Group*>(groups + group_bytes);
  const __m512i* biases = nullptr;
  if constexpr (k_int8_codes<Group>) biases = weight_biases(n_blocks, wa, wb);
  for_tiles_of<k_pair_tile_tokens>(n_tokens, [&](auto tile, int64_t t) {
    const PairActivations tile_act{act.rows + t * act.row_stride, act.row_stride, act.block_sums ? act.block_sums + t * n_blocks : nullptr,
                                   act.block_scales ? act.block_scales + t : nullptr, act.scale_stride};
    pair_tile<tile.value, Group>(n_blocks, wa, wb, biases, tile_act, out + t * out_stride, out_stride);
  });
}

}  // namespace

InterleavedPairFn interleaved_pair_kernel_avx512(DType type) {
  switch (type) {
    case DType::q8_0: return pair_blocks<PairQ8_0>;
    case DType::q4_0: return pair_blocks<GroupQ4_0>;
    case DType::i8: return pair_blocks<PairI8>;
    default: return interleaved_pair_kernel_avx512_k(type);
  }
}

}  // namespace ds
