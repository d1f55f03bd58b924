// AVX2 tile kernels over interleaved rows (kernels/interleaved_rows.h): Q8_0,
// Q4_0, Q5_0, Q4_1, Q5_1, MXFP4 and I8 from interleaved_tiles_x86.h with
// maddubs, and the K types.
// Compiled with -mavx2 -mfma -mf16c; only called when cpu_features() reports
// all three.

#include <immintrin.h>

#include <type_traits>

#include "kernels/interleaved_k_groups_x86.h"
#include "kernels/interleaved_tiles_x86.h"

namespace ds {
namespace {

static_assert(sizeof(GroupQ8_0<8>) == 8 * sizeof(BlockQ8_0) && sizeof(GroupQ8_0<16>) == 16 * sizeof(BlockQ8_0) &&
                  sizeof(GroupQ4_0) == 8 * sizeof(BlockQ4_0) && sizeof(GroupQ5_0) == 8 * sizeof(BlockQ5_0) &&
                  sizeof(GroupQ4_1) == 8 * sizeof(BlockQ4_1) && sizeof(GroupQ5_1) == 8 * sizeof(BlockQ5_1) &&
                  sizeof(GroupMxfp4) == 8 * sizeof(BlockMxfp4),
              "a group block holds its rows' blocks");

// Q4_K and Q5_K x Q8_K, the formula of the row kernel: per super-block, the
// unsigned codes (4-bit, or 5-bit with the fifth from qh) times the
// activations summed per sub-block in int16 (pair sums of at most 2 x 15 x
// 127, eight of them under 32767; 2 x 31 x 127 for Q5_K, four of them), times
// the rows' 6-bit scales in int32; the mins through the activations' sums per
// sub-block; then out += d_a * (d * sum - dmin * mins) in float, rows in lanes.
template <int T, typename Group>
void superblock(const Group& w, const KScales& s, const uint8_t* act, int64_t act_stride, int64_t b, float* out,
                  int64_t out_stride) {
  constexpr int k_chunks_in_int16 = std::is_same_v<Group, GroupQ5_K> ? 4 : 8;
  __m256i sums[T];
  for (int j = 0; j < T; ++j) sums[j] = _mm256_setzero_si256();
  for (int pair = 0; pair < 4; ++pair) {
    for (int c0 = 0; c0 < 8; c0 += k_chunks_in_int16) {
      __m256i low16[T], high16[T];
      for (int j = 0; j < T; ++j) low16[j] = high16[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
      for (int c = c0; c < c0 + k_chunks_in_int16; ++c) {
        __m256i low, high;
        k_chunk_codes(w, pair, c, low, high);
        for (int j = 0; j < T; ++j) {
          const int8_t* qs = reinterpret_cast<const BlockQ8_K*>(act + j * act_stride)[b].qs + 64 * pair;
          low16[j] = _mm256_add_epi16(low16[j], _mm256_maddubs_epi16(low, broadcast_chunk(qs, c)));
          high16[j] = _mm256_add_epi16(high16[j], _mm256_maddubs_epi16(high, broadcast_chunk(qs + 32, c)));
        }
      }
      const __m256i scale_low = s.scales[2 * pair], scale_high = s.scales[2 * pair + 1];
      for (int j = 0; j < T; ++j) {
        sums[j] = _mm256_add_epi32(sums[j], _mm256_add_epi32(_mm256_madd_epi16(low16[j], scale_low),
                                                             _mm256_madd_epi16(high16[j], scale_high)));
      }
    }
  }
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.d)));
  const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.dmin)));
  for (int j = 0; j < T; ++j) {
    const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(act + j * act_stride)[b];
    __m256i min_sums = _mm256_setzero_si256();
    for (int s2 = 0; s2 < 4; ++s2) {
      // The activation sums of sub-blocks 2 * s2 and 2 * s2 + 1, as an int16 pair.
      const int16_t lo = int16_t(a.bsums[4 * s2] + a.bsums[4 * s2 + 1]);
      const int16_t hi = int16_t(a.bsums[4 * s2 + 2] + a.bsums[4 * s2 + 3]);
      const __m256i pair_sums = _mm256_set1_epi32(int32_t(uint16_t(lo)) | (int32_t(uint16_t(hi)) << 16));
      min_sums = _mm256_add_epi32(min_sums, _mm256_madd_epi16(s.mins[s2], pair_sums));
    }
    const __m256 inner = _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(sums[j])),
                                       _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(min_sums)));
    float* o = out + j * out_stride;
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(_mm256_set1_ps(a.d), inner)));
  }
}

// Q6_K x Q8_K, the formula of the row kernel: the unsigned codes (stored +
// 32) times the activations, two 4-element chunks summed in int16 (pair sums
// of at most 2 x 63 x 127, two of them under 32767), times the rows' 8-bit
// sub-block scales in int32; the +32 taken out through the activations'
// sums per sub-block; then out += d_a * (d * sum) in float, rows in lanes.
template <int T>
void superblock(const GroupQ6_K& w, const Q6KScales& s, const uint8_t* act, int64_t act_stride, int64_t b,
                     float* out, int64_t out_stride) {
  __m256i sums[T];
  for (int j = 0; j < T; ++j) sums[j] = _mm256_setzero_si256();
  // Chunks i and i + 1 of each quarter q (chunks 16q + i: sub-block 4q + i / 4).
#pragma GCC unroll 1
  for (int i = 0; i < 16; i += 2) {
    // Unrolled, so that every shift and slot is a constant.
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      __m256i c0, c1;
      q6_k_chunk_codes(w, i, q, c0, c1);
      const __m256i scale = s.scales[4 * q + i / 4];
      for (int j = 0; j < T; ++j) {
        const int8_t* qs = reinterpret_cast<const BlockQ8_K*>(act + j * act_stride)[b].qs + 64 * q + 4 * i;
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(c0, broadcast_chunk(qs, 0)),
                                               _mm256_maddubs_epi16(c1, broadcast_chunk(qs, 1)));
        sums[j] = _mm256_add_epi32(sums[j], _mm256_madd_epi16(pairs, scale));
      }
    }
  }
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.d)));
  for (int j = 0; j < T; ++j) {
    const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(act + j * act_stride)[b];
    __m256i offsets = _mm256_setzero_si256();
    for (int p = 0; p < 8; ++p) {
      const int32_t pair_sums = int32_t(uint16_t(a.bsums[2 * p])) | (int32_t(uint16_t(a.bsums[2 * p + 1])) << 16);
      offsets = _mm256_add_epi32(offsets, _mm256_madd_epi16(s.pairs[p], _mm256_set1_epi32(pair_sums)));
    }
    const __m256i total = _mm256_sub_epi32(sums[j], _mm256_slli_epi32(offsets, 5));
    float* o = out + j * out_stride;
    const __m256 inner = _mm256_mul_ps(d, _mm256_cvtepi32_ps(total));
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(_mm256_set1_ps(a.d), inner)));
  }
}

KScales scales_of(const GroupQ4_K& w) { return KScales(w.scales); }
KScales scales_of(const GroupQ5_K& w) { return KScales(w.scales); }
Q6KScales scales_of(const GroupQ6_K& w) { return Q6KScales(w); }

// Super-blocks outer, token tiles inner: the scales are unpacked once per
// super-block and the outputs accumulate in place, in the same order for
// every token.
template <typename Group>
void group_k(int64_t n_blocks, const uint8_t* group, const uint8_t* act, int64_t act_stride, const int32_t*,
             int64_t n_tokens, float* out, int64_t out_stride) {
  const auto* w = reinterpret_cast<const Group*>(group);
  const uint8_t* next = group_to_prefetch<Group>(group, n_blocks);
  for (int64_t j = 0; j < n_tokens; ++j) _mm256_storeu_ps(out + j * out_stride, _mm256_setzero_ps());
  for (int64_t b = 0; b < n_blocks; ++b) {
    prefetch_block<Group>(next, b);
    const auto scales = scales_of(w[b]);
    for_tiles_of_four(n_tokens, [&](auto tile, int64_t t) {
      superblock<tile.value>(w[b], scales, act + t * act_stride, act_stride, b, out + t * out_stride, out_stride);
    });
  }
}

}  // namespace

InterleavedGroupFn interleaved_kernel_avx2(DType type) {
  switch (type) {
    case DType::q8_0: return int8_group_kernel<DType::q8_0, MaddubsDot>();
    case DType::q4_0: return group_nibbles<GroupQ4_0, MaddubsDot>;
    case DType::q5_0: return group_nibbles<GroupQ5_0, MaddubsDot>;
    case DType::q4_1: return group_nibbles<GroupQ4_1, MaddubsDot>;
    case DType::q5_1: return group_nibbles<GroupQ5_1, MaddubsDot>;
    case DType::mxfp4: return group_mxfp4<MaddubsDot>;
    case DType::i8: return int8_group_kernel<DType::i8, MaddubsDot>();
    case DType::q4_k: return group_k<GroupQ4_K>;
    case DType::q5_k: return group_k<GroupQ5_K>;
    case DType::q6_k: return group_k<GroupQ6_K>;
    default: return nullptr;
  }
}

}  // namespace ds
