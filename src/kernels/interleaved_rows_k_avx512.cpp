// The K types' pair kernels on AVX-512 (interleaved_rows.h): Q4_K, Q5_K and
// Q6_K against Q8_K activations, two 8-row groups side by side in 512-bit
// registers (the first group's rows in the low half), bit for bit the AVX2
// kernel's outputs (tested).
//
// VNNI's dpbusd sums a sub-block's code x activation products straight into int32
// lanes, and vpmulld applies the row's sub-block scale: the AVX2 kernel's
// int16 pair sums, their adds and madd become one instruction per chunk.
// Every integer is exact (a sub-block's sum stays within 32 x 63 x 127), so
// the super-block's sum equals the AVX2 kernel's, and the float part (d x sum
// - dmin x the mins' sum, Q6_K's d x sum, times the token's scale, added to
// the output) is that kernel's operation for operation.
//
// Compiled with AVX-512F/BW/VL and AVX512_VNNI; only called where
// interleaved_pair_kernel() hands it out.

#include <immintrin.h>

#include <cstring>

// GCC 12 flags the undefined pass-through operand inside its own AVX-512
// intrinsics (_mm512_undefined_*) as uninitialized: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/interleaved_k_groups_x86.h"
#include "kernels/interleaved_pairs_x86.h"
#include "kernels/tiles_of_four.h"

namespace ds {
namespace {

// out (16 rows of one token) += a_d x inner, as the AVX2 kernel adds it.
inline void add_to_output(float* out, float a_d, __m512 inner) {
  _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), _mm512_mul_ps(_mm512_set1_ps(a_d), inner)));
}

// A super-block's codes, decoded once for every tile of tokens: codes[k] =
// chunk k (elements 4k..4k+3) of the 16 rows, unsigned bytes (Q4_K 0..15,
// Q5_K 0..31, Q6_K its stored value + 32, 0..63).
struct PairCodes {
  __m512i codes[k_qk_k / 4];
};

template <typename Group>
void decode(const Group& wa, const Group& wb, PairCodes& out) {
  const auto load = two_groups(reinterpret_cast<const uint8_t*>(&wa), reinterpret_cast<const uint8_t*>(&wb));
  if constexpr (std::is_same_v<Group, GroupQ6_K>) {
    for (int i = 0; i < 16; i += 2) {
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) q6_k_chunk_codes(load, i, q, out.codes[16 * q + i], out.codes[16 * q + i + 1]);
    }
  } else {
    for (int pair = 0; pair < 4; ++pair) {
      for (int c = 0; c < 8; ++c) k_chunk_codes<Group>(load, pair, c, out.codes[16 * pair + c], out.codes[16 * pair + 8 + c]);
    }
  }
}

// The exact integer sum of a super-block for each of T tokens: per sub-block
// (SubChunks chunks under one scale: Q4_K's and Q5_K's 8, Q6_K's 4), the
// codes' products with the activations in int32 lanes, times the rows'
// scale of the sub-block (scales[s]: int32 lane r = row r's). Two
// sub-blocks at a time, so that 2T chains of dpbusd overlap their latency.
template <int T, int SubChunks>
inline void superblock_sums(const PairCodes& w, const __m512i* scales, const uint8_t* act, int64_t act_stride, int64_t b,
                            __m512i (&sums)[T]) {
  const auto codes_of = [&](int j) { return reinterpret_cast<const BlockQ8_K*>(act + j * act_stride)[b].qs; };
  for (int j = 0; j < T; ++j) sums[j] = _mm512_setzero_si512();
  for (int s = 0; s < k_qk_k / 4 / SubChunks; s += 2) {
    __m512i first[T], second[T];
    for (int j = 0; j < T; ++j) first[j] = second[j] = _mm512_setzero_si512();
    // Unrolled: rolled, GCC copies the dpbusd accumulators between registers every iteration.
#pragma GCC unroll 8
    for (int c = 0; c < SubChunks; ++c) {
      const int k = s * SubChunks + c;
      const __m512i first_codes = w.codes[k], second_codes = w.codes[k + SubChunks];
      for (int j = 0; j < T; ++j) {
        first[j] = _mm512_dpbusd_epi32(first[j], first_codes, broadcast_codes(codes_of(j) + 4 * k));
        second[j] = _mm512_dpbusd_epi32(second[j], second_codes, broadcast_codes(codes_of(j) + 4 * (k + SubChunks)));
      }
    }
    for (int j = 0; j < T; ++j) {
      sums[j] = _mm512_add_epi32(sums[j], _mm512_add_epi32(_mm512_mullo_epi32(first[j], scales[s]), _mm512_mullo_epi32(second[j], scales[s + 1])));
    }
  }
}

// Q4_K and Q5_K: the two groups' scales and mins of one super-block, for all
// tokens. scales[s]: int32 lane r = row r's scale of sub-block s; mins[k]:
// int16 lanes 2r, 2r + 1 = row r's mins of sub-blocks 2k, 2k + 1 (KScales'
// lanes, the scales' duplicate int16 halves cut to one).
struct PairKScales {
  static constexpr int k_sub_chunks = 8;
  __m512i scales[8], mins[4];
  __m512 d, dmin;
  template <typename Group>
  PairKScales(const Group& a, const Group& b) : d(join_f16(a.d, b.d)), dmin(join_f16(a.dmin, b.dmin)) {
    const KScales sa(a.scales), sb(b.scales);
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    for (int s = 0; s < 8; ++s) scales[s] = _mm512_and_si512(join(sa.scales[s], sb.scales[s]), low16);
    for (int k = 0; k < 4; ++k) mins[k] = join(sa.mins[k], sb.mins[k]);
  }
  // d x sum - dmin x the mins' sum, for token a's super-block sum.
  __m512 inner(const BlockQ8_K& a, __m512i sum) const {
    // The activation sums of sub-blocks 2k and 2k + 1 as int16 pairs (dword k):
    // neighbouring bsums added, wrapping as the AVX2 kernel's int16 sums do.
    const __m128i pair_sums = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums)),
                                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums + 8)));
    alignas(16) int32_t pairs[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(pairs), pair_sums);
    __m512i min_sums = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) min_sums = _mm512_add_epi32(min_sums, _mm512_madd_epi16(mins[k], _mm512_set1_epi32(pairs[k])));
    return _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(sum)), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(min_sums)));
  }
};

// Q6_K: scales[s]: int32 lane r = row r's (signed) scale of sub-block s;
// pairs[p]: int16 lanes 2r, 2r + 1 = row r's scales of sub-blocks 2p, 2p + 1
// (Q6KScales' lanes for both groups).
struct PairQ6KScales {
  static constexpr int k_sub_chunks = 4;
  __m512i scales[16], pairs[8];
  __m512 d;
  PairQ6KScales(const GroupQ6_K& a, const GroupQ6_K& b) : d(join_f16(a.d, b.d)) {
    const Q6KScales sa(a), sb(b);
    for (int s = 0; s < 16; ++s) {
      const __m128i rows = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a.scales[s])),
                                              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales[s])));
      scales[s] = _mm512_cvtepi8_epi32(rows);
    }
    for (int p = 0; p < 8; ++p) pairs[p] = join(sa.pairs[p], sb.pairs[p]);
  }
  // d x (sum - 32 x the scales' sum over the activations' sub-block sums): the codes' +32 taken back out.
  __m512 inner(const BlockQ8_K& a, __m512i sum) const {
    __m512i offsets = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) {
      int32_t pair_sums;  // bsums 2p and 2p + 1, an int16 pair
      std::memcpy(&pair_sums, a.bsums + 2 * p, 4);
      offsets = _mm512_add_epi32(offsets, _mm512_madd_epi16(pairs[p], _mm512_set1_epi32(pair_sums)));
    }
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(sum, _mm512_slli_epi32(offsets, 5))));
  }
};

// The super-block's sums, then each token's float part added to its outputs.
template <int T, typename Scales>
void pair_superblock(const PairCodes& w, const Scales& s, const uint8_t* act, int64_t act_stride, int64_t b, float* out,
                     int64_t out_stride) {
  __m512i sums[T];
  superblock_sums<T, Scales::k_sub_chunks>(w, s.scales, act, act_stride, b, sums);
  for (int j = 0; j < T; ++j) {
    const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(act + j * act_stride)[b];
    add_to_output(out + j * out_stride, a.d, s.inner(a, sums[j]));
  }
}

PairKScales scales_of(const GroupQ4_K& a, const GroupQ4_K& b) { return {a, b}; }
PairKScales scales_of(const GroupQ5_K& a, const GroupQ5_K& b) { return {a, b}; }
PairQ6KScales scales_of(const GroupQ6_K& a, const GroupQ6_K& b) { return {a, b}; }

// Super-blocks outer, token tiles inner, as the AVX2 kernel: the outputs
// accumulate in place from 0, super-blocks in order.
template <typename Group>
void pair_k(int64_t n_blocks, const uint8_t* groups, int64_t group_bytes, const PairActivations& act, int64_t n_tokens, float* out,
            int64_t out_stride) {
  const auto* wa = reinterpret_cast<const Group*>(groups);
  const auto* wb = reinterpret_cast<const Group*>(groups + group_bytes);
  for (int64_t j = 0; j < n_tokens; ++j) _mm512_storeu_ps(out + j * out_stride, _mm512_setzero_ps());
  PairCodes codes;
  for (int64_t b = 0; b < n_blocks; ++b) {
    decode(wa[b], wb[b], codes);
    const auto scales = scales_of(wa[b], wb[b]);
    for_tiles_of<k_pair_tile_tokens>(n_tokens, [&](auto tile, int64_t t) {
      pair_superblock<tile.value>(codes, scales, act.rows + t * act.row_stride, act.row_stride, b, out + t * out_stride, out_stride);
    });
  }
}

}  // namespace

InterleavedPairFn interleaved_pair_kernel_avx512_k(DType type) {
  switch (type) {
    case DType::q4_k: return pair_k<GroupQ4_K>;
    case DType::q5_k: return pair_k<GroupQ5_K>;
    case DType::q6_k: return pair_k<GroupQ6_K>;
    default: return nullptr;
  }
}

}  // namespace ds
