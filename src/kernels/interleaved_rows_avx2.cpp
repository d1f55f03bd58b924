// AVX2 tile kernels over interleaved rows (kernels/interleaved_rows.h).
// Compiled with -mavx2 -mfma -mf16c; only called when cpu_features() reports
// all three.
//
// Each block's dot product is exact in int32; the float part adds
// (row scale x token scale) x block sum into one accumulator per (row,
// token), blocks in order, whatever the tile size: a token's outputs do not
// depend on how many tokens share its step.

#include <immintrin.h>

#include <cstring>

#include "base/fp16.h"
#include "kernels/interleaved_rows.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

struct GroupQ8_0 {
  uint16_t d[k_interleave];
  int8_t qs[k_interleave * k_qk];
};
struct GroupQ4_0 {
  uint16_t d[k_interleave];
  uint8_t qs[k_interleave * k_qk / 2];
};
static_assert(sizeof(GroupQ8_0) == 8 * sizeof(BlockQ8_0) && sizeof(GroupQ4_0) == 8 * sizeof(BlockQ4_0),
              "a group block holds eight row blocks");

// Activations 4c..4c+3 of a block, in all eight lanes.
inline __m256i broadcast_chunk(const BlockQ8_0& a, int c) {
  int32_t v;
  std::memcpy(&v, a.qs + 4 * c, 4);
  return _mm256_set1_epi32(v);
}

inline const BlockQ8_0& act_block(const uint8_t* act, int64_t act_stride, int j, int64_t b) {
  return reinterpret_cast<const BlockQ8_0*>(act + j * act_stride)[b];
}

// Adds the block's int32 sums, scaled by row scale x token scale, to acc.
inline __m256 accumulate(__m256 acc, __m256 row_scales, const BlockQ8_0& a, __m256i sums) {
  const __m256 scale = _mm256_mul_ps(row_scales, _mm256_set1_ps(_cvtsh_ss(a.d)));
  return _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc);
}

// Q8_0 x Q8_0: maddubs wants one unsigned operand, so |w| meets a with w's
// sign moved onto it; |w| is taken once per register for the whole tile.
template <int T>
void tile_q8_0(int64_t n_blocks, const uint8_t* group, const uint8_t* act, int64_t act_stride, const int32_t*,
               float* out, int64_t out_stride) {
  const auto* w = reinterpret_cast<const GroupQ8_0*>(group);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m256i sums[T];
    for (int j = 0; j < T; ++j) sums[j] = _mm256_setzero_si256();
    // Not unrolled: unrolled, GCC reorders the int32 adds into a tree and
    // spills the partial sums (measured 10% slower for Q8_0, 20% for Q4_0).
#pragma GCC unroll 1
    for (int c = 0; c < 8; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * c));
      const __m256i abs_q = _mm256_sign_epi8(q, q);
      for (int j = 0; j < T; ++j) {
        const __m256i signed_a = _mm256_sign_epi8(broadcast_chunk(act_block(act, act_stride, j, b), c), q);
        sums[j] = _mm256_add_epi32(sums[j], _mm256_madd_epi16(_mm256_maddubs_epi16(abs_q, signed_a), ones));
      }
    }
    const __m256 row_scales = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d)));
    for (int j = 0; j < T; ++j) acc[j] = accumulate(acc[j], row_scales, act_block(act, act_stride, j, b), sums[j]);
  }
  for (int j = 0; j < T; ++j) _mm256_storeu_ps(out + j * out_stride, acc[j]);
}

// Q4_0 x Q8_0: the unsigned codes q = w + 8 go straight into maddubs; eight
// pair sums of at most 2 x 15 x 127 fit int16, so a block is summed in int16
// and widened once, and 8 * sum(a) (the offsets) takes the +8 back out.
template <int T>
void tile_q4_0(int64_t n_blocks, const uint8_t* group, const uint8_t* act, int64_t act_stride, const int32_t* offsets,
               float* out, int64_t out_stride) {
  const auto* w = reinterpret_cast<const GroupQ4_0*>(group);
  const __m256i ones = _mm256_set1_epi16(1), low_nibbles = _mm256_set1_epi8(0x0F);
  __m256 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m256i sums16[T];
    for (int j = 0; j < T; ++j) sums16[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int v = 0; v < 4; ++v) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * v));
      const __m256i low = _mm256_and_si256(packed, low_nibbles);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
      for (int j = 0; j < T; ++j) {
        const BlockQ8_0& a = act_block(act, act_stride, j, b);
        const __m256i products = _mm256_add_epi16(_mm256_maddubs_epi16(low, broadcast_chunk(a, v)),
                                                  _mm256_maddubs_epi16(high, broadcast_chunk(a, 4 + v)));
        sums16[j] = _mm256_add_epi16(sums16[j], products);
      }
    }
    const __m256 row_scales = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d)));
    for (int j = 0; j < T; ++j) {
      const __m256i sums = _mm256_sub_epi32(_mm256_madd_epi16(sums16[j], ones), _mm256_set1_epi32(offsets[j * n_blocks + b]));
      acc[j] = accumulate(acc[j], row_scales, act_block(act, act_stride, j, b), sums);
    }
  }
  for (int j = 0; j < T; ++j) _mm256_storeu_ps(out + j * out_stride, acc[j]);
}

}  // namespace

InterleavedTileFn interleaved_tile_avx2(DType type, int n_tokens) {
  static constexpr InterleavedTileFn q8_0[] = {tile_q8_0<1>, tile_q8_0<2>, tile_q8_0<3>, tile_q8_0<4>};
  static constexpr InterleavedTileFn q4_0[] = {tile_q4_0<1>, tile_q4_0<2>, tile_q4_0<3>, tile_q4_0<4>};
  static_assert(sizeof(q8_0) / sizeof(q8_0[0]) == k_interleaved_token_tile, "one kernel per tile size");
  if (n_tokens < 1 || n_tokens > k_interleaved_token_tile) return nullptr;
  switch (type) {
    case DType::q8_0: return q8_0[n_tokens - 1];
    case DType::q4_0: return q4_0[n_tokens - 1];
    default: return nullptr;
  }
}

}  // namespace ds
