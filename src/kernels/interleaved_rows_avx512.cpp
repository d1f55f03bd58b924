// The pair kernels of the 32-code block types (Q8_0, Q4_0, Q5_0, Q4_1,
// Q5_1, MXFP4) and I8 on AVX-512 (interleaved_rows.h): two 8-row groups
// side by side in 512-bit registers (interleaved_pairs_x86.h) against tiles
// of up to eight tokens, bit for bit the VNNI group kernels' outputs
// (tested).
//
// A block's products go into int32 lanes through dpbusd, in two chains (its
// first and second halves: 2T chains hide the instruction's latency), each
// lane exact; the chains start from the block's correction (Q8_0 and I8:
// -128 x the row's weight sum, for the biased activation codes; Q4_0, Q5_0
// and MXFP4: -offset x the token's code sum, for the unsigned weight codes),
// so their sum is the block's exact dot product, as the VNNI kernel's. Its
// float part, (row scale x token scale) x sum (and Q4_1's and Q5_1's row
// min x the block's s) added into one accumulator per output, blocks in
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

// The nibble types and MXFP4: what their codes are offset by (k_offset x
// the activations' block sum comes back out), and their activation blocks
// (Q8_1 for Q4_1 and Q5_1, whose rows' mins meet the blocks' s).
template <typename Group>
constexpr int code_offset() {
  if constexpr (std::is_same_v<Group, GroupMxfp4>) return k_mxfp4_offset;
  else return Group::k_offset;
}
template <typename Group, typename = void>
struct ActBlock {
  using type = BlockQ8_0;
};
template <typename Group>
struct ActBlock<Group, std::void_t<typename Group::Act>> {
  using type = typename Group::Act;
};
template <typename Group>
using ActOf = typename ActBlock<Group>::type;
template <typename Group>
constexpr bool k_row_mins = std::is_same_v<ActOf<Group>, BlockQ8_1>;

// The unsigned codes of chunk v (v < 4) of a nibble block (byte 32v + 4r +
// i: row r's element 4v + i in the low nibble, 16 + 4v + i in the high one):
// Q5's fifth bits from `fifth` (the rows' qh words, shifted one bit a chunk,
// interleaved_tiles_x86.h's tile_nibbles), MXFP4's values (doubled, plus 12)
// through the table.
template <typename Group, typename Load>
inline void nibble_codes(Load load, int v, __m512i& fifth, __m512i& low, __m512i& high) {
  const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
  const __m512i packed = load(offsetof(Group, qs) + size_t(32 * v));
  low = _mm512_and_si512(packed, low_nibbles);
  high = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibbles);
  if constexpr (std::is_same_v<Group, GroupMxfp4>) {
    const __m512i values = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(k_mxfp4_offset_values.v)));
    low = _mm512_shuffle_epi8(values, low);
    high = _mm512_shuffle_epi8(values, high);
  } else if constexpr (Group::k_max_code > 15) {
    // Bit 8i + v of a row's word: element 4v + i's fifth bit; 8i + 4 + v: 16 + 4v + i's.
    const __m512i fifth_bit = _mm512_set1_epi8(0x10);
    low = _mm512_or_si512(low, _mm512_and_si512(_mm512_slli_epi32(fifth, 4), fifth_bit));
    high = _mm512_or_si512(high, _mm512_and_si512(fifth, fifth_bit));
    fifth = _mm512_srli_epi32(fifth, 1);
  }
}

// The rows' scales of block b as floats (MXFP4's halved E8M0 ones).
template <typename Group>
inline __m512 row_scales(const Group& a, const Group& b) {
  if constexpr (std::is_same_v<Group, GroupMxfp4>) {
    return _mm512_castsi512_ps(join(_mm256_castps_si256(mxfp4_row_scales(a.e)), _mm256_castps_si256(mxfp4_row_scales(b.e))));
  } else {
    return join_f16(a.d, b.d);
  }
}

// I8 has no float part: each (row, token) sums every block in its int32
// lanes (exact: rows are at most k_max_i8_cols long), written as a float.
template <int T, typename Group>
void pair_tile(int64_t n_blocks, const Group* wa, const Group* wb, const __m512i* biases, const PairActivations& act, float* out,
               int64_t out_stride) {
  constexpr bool k_i8 = std::is_same_v<Group, PairI8>;
  const auto codes_of = [&](int j, int64_t b) {
    if constexpr (k_i8) return reinterpret_cast<const int8_t*>(act.rows + j * act.row_stride) + b * k_qk;
    else return act_block<ActOf<Group>>(act.rows, act.row_stride, j, b).qs;
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
        first[j] = code_offset<Group>() ? _mm512_set1_epi32(-code_offset<Group>() * act.block_sums[j * n_blocks + b]) : _mm512_setzero_si512();
        second[j] = _mm512_setzero_si512();
      }
      __m512i fifth = _mm512_setzero_si512();
      if constexpr (!std::is_same_v<Group, GroupMxfp4>) {
        if constexpr (Group::k_max_code > 15) fifth = load(offsetof(Group, qh));
      }
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        __m512i low, high;
        nibble_codes<Group>(load, v, fifth, low, high);
        for (int j = 0; j < T; ++j) {
          first[j] = _mm512_dpbusd_epi32(first[j], low, broadcast_codes(codes_of(j, b) + 4 * v));
          second[j] = _mm512_dpbusd_epi32(second[j], high, broadcast_codes(codes_of(j, b) + 16 + 4 * v));
        }
      }
    }
    if constexpr (k_i8) {
      for (int j = 0; j < T; ++j) totals[j] = _mm512_add_epi32(first[j], second[j]);
    } else if constexpr (k_row_mins<Group>) {
      const __m512 scales = row_scales(wa[b], wb[b]), mins = join_f16(wa[b].m, wb[b].m);
      for (int j = 0; j < T; ++j) {
        const BlockQ8_1& a = act_block<BlockQ8_1>(act.rows, act.row_stride, j, b);
        const __m512 scale = _mm512_mul_ps(scales, _mm512_set1_ps(_cvtsh_ss(a.d)));
        acc[j] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(_mm512_add_epi32(first[j], second[j])), acc[j]);
        acc[j] = _mm512_fmadd_ps(mins, _mm512_set1_ps(_cvtsh_ss(a.s)), acc[j]);
      }
    } else {
      const __m512 scales = row_scales(wa[b], wb[b]);
      const float* token_scales = act.block_scales + b * act.scale_stride;
      for (int j = 0; j < T; ++j) {
        const __m512 scale = _mm512_mul_ps(scales, _mm512_set1_ps(token_scales[j]));
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
    case DType::q5_0: return pair_blocks<GroupQ5_0>;
    case DType::q4_1: return pair_blocks<GroupQ4_1>;
    case DType::q5_1: return pair_blocks<GroupQ5_1>;
    case DType::mxfp4: return pair_blocks<GroupMxfp4>;
    case DType::i8: return pair_blocks<PairI8>;
    default: return interleaved_pair_kernel_avx512_k(type);
  }
}

}  // namespace ds
