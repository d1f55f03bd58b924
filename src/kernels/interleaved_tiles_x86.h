#pragma once
// The Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, MXFP4 and I8 tile kernels over interleaved rows (kernels/
// interleaved_rows.h), written once for two instruction sets: `Dot` says how
// unsigned-by-signed byte products reach int32 lanes, AVX2's maddubs + madd
// (MaddubsDot, here) or AVX-512 VNNI's dpbusd (interleaved_rows_vnni.cpp).
// Every sum is exact in both, so both give the same bits. Included only by
// the two kernel files, each compiled for its ISA; everything here has
// internal linkage, so neither file's code reaches the other's callers.
//
// Each block's dot product is exact in int32; the float part adds
// (row scale x token scale) x block sum into one accumulator per (row,
// token), blocks in order, whatever the tile size: a token's outputs do not
// depend on how many tokens share its step. I8 has no float part: a row's
// whole sum is exact in int32.

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "base/fp16.h"
#include "kernels/interleaved_rows.h"
#include "kernels/tiles_of_four.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

// AVX2: four u8 x s8 products per int32 lane through maddubs' int16 pairs.
// Pairs of at most 2 x 128 x 127 (Q8_0's and I8's |w| against a) or 2 x 15 x
// 127 (Q4_0's codes) stay under 32767: exact.
//
// A Dot has
//   add4(sums, u, s):     sums (int32 lanes) += the four products of each lane;
//   add_chunk(acc, u, s): a block's accumulator += the products, which for
//                         MaddubsDot is int16 pair sums (each kernel says why
//                         its chunks stay under 32767), for VNNI int32 lanes;
//   to_int32(acc):        the accumulator's sums per int32 lane;
//   k_biased:             whether the Q8_0 and I8 tiles read biased
//                         activation codes (interleaved_rows.h): add4 then
//                         meets them with the signed weights directly, one
//                         instruction where moving w's sign onto a takes two.
//                         Only where add4 sums u8 x s8 products of up to
//                         255 x 128 exactly: VNNI, not maddubs;
//   k_registers:          the ymm registers the ISA has (AVX2 16,
//                         AVX-512VL 32), which bounds a tile's accumulators.
struct MaddubsDot {
  static constexpr bool k_biased = false;
  static constexpr int k_registers = 16;
  static __m256i add4(__m256i sums, __m256i u, __m256i s) {
    return _mm256_add_epi32(sums, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  static __m256i add_chunk(__m256i acc, __m256i u, __m256i s) { return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s)); }
  static __m256i to_int32(__m256i acc) { return _mm256_madd_epi16(acc, _mm256_set1_epi16(1)); }
};

// Q8_0's and I8's groups hold 8 rows, or 16 where AMX runs
// (interleaved_rows.h); a tile takes eight of them, one half of a 16-row group.
template <int64_t Rows>
struct GroupQ8_0 {
  static constexpr int64_t k_rows = Rows;
  uint16_t d[Rows];
  int8_t qs[Rows * k_qk];
};
// The nibble types: the codes as the file's nibbles (interleaved_rows.h),
// Q5_0's and Q5_1's fifth bits beside them in qh, a word per row; the
// unsigned codes are the values plus k_offset (Q4_0, Q5_0), or the values
// are d x code + m (Q4_1, Q5_1: Act is Q8_1, whose s = d x sum(a) meets m).
struct GroupQ4_0 {
  static constexpr int k_offset = 8, k_max_code = 15;
  using Act = BlockQ8_0;
  uint16_t d[k_interleave];
  uint8_t qs[k_interleave * k_qk / 2];
};
struct GroupQ5_0 {
  static constexpr int k_offset = 16, k_max_code = 31;
  using Act = BlockQ8_0;
  uint16_t d[k_interleave];
  uint32_t qh[k_interleave];
  uint8_t qs[k_interleave * k_qk / 2];
};
struct GroupQ4_1 {
  static constexpr int k_offset = 0, k_max_code = 15;
  using Act = BlockQ8_1;
  uint16_t d[k_interleave], m[k_interleave];
  uint8_t qs[k_interleave * k_qk / 2];
};
struct GroupQ5_1 {
  static constexpr int k_offset = 0, k_max_code = 31;
  using Act = BlockQ8_1;
  uint16_t d[k_interleave], m[k_interleave];
  uint32_t qh[k_interleave];
  uint8_t qs[k_interleave * k_qk / 2];
};
struct GroupMxfp4 {
  uint8_t e[k_interleave];
  uint8_t qs[k_interleave * k_qk / 2];
};
template <int64_t Rows>
struct GroupI8 {
  static constexpr int64_t k_rows = Rows;
  int8_t qs[Rows * k_qk];
};

// Chunk c (four codes of eight rows) of a Q8_0 or I8 group block's half h.
template <typename Group>
inline __m256i load_chunk(const Group& w, int64_t h, int c) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 4 * Group::k_rows * c + k_qk * h));
}

// Activations 4c..4c+3 of a block, in all eight lanes.
inline __m256i broadcast_chunk(const int8_t* qs, int c) {
  int32_t v;
  std::memcpy(&v, qs + 4 * c, 4);
  return _mm256_set1_epi32(v);
}

template <typename Block = BlockQ8_0>
inline const Block& act_block(const uint8_t* act, int64_t act_stride, int j, int64_t b) {
  return reinterpret_cast<const Block*>(act + j * act_stride)[b];
}

// While a group's first tile of tokens runs its block b, the next group's
// block b is fetched into L2. With more than one tile a group is
// compute-bound, and the fetch overlaps it, which the hardware prefetcher
// alone does not do early enough (measured on a 3 MB Q8_0 matrix from DRAM:
// +20% at 8 tokens, +13% at 16). In decode it is a second stream a group
// ahead of the one the kernel reads: one stream a thread left the memory
// under-read (the 1.1B model's tg64 on a Sapphire Rapids-class Xeon: Q8_0
// 19.1 -> 24.3 tok/s, Q4_0 26.4 -> 42.7, the V2-Lite-width MoE in Q4_K_M 37.0
// -> 61.9). `next` is null for the other tiles.
template <typename Block>
inline void prefetch_block(const uint8_t* next, int64_t b) {
  if (!next) return;
  const char* p = reinterpret_cast<const char*>(next + b * int64_t(sizeof(Block)));
  for (size_t line = 0; line < sizeof(Block); line += 64) _mm_prefetch(p + line, _MM_HINT_T1);
}

template <typename Block>
inline const uint8_t* group_to_prefetch(const uint8_t* group, int64_t n_blocks) {
  return group + n_blocks * int64_t(sizeof(Block));
}

// sums[j] += the products of q (chunk c of eight rows' block: four weights
// per lane) and chunk c of token j's 32 codes at codes(j). Unbiased codes:
// |w| (taken once for the tile) meets a with w's sign moved onto it. Biased
// codes a + 128 meet w as they are, and weight_sums gathers each row's
// weights so that the tile can take 128 x their sum back out (in int32's
// wrapping arithmetic, which leaves the exact sum exact).
template <int T, typename Dot, typename Codes>
inline void add_chunk_products(__m256i q, int c, Codes codes, __m256i* sums, __m256i& weight_sums) {
  if constexpr (Dot::k_biased) {
    weight_sums = Dot::add4(weight_sums, _mm256_set1_epi8(1), q);
    for (int j = 0; j < T; ++j) sums[j] = Dot::add4(sums[j], broadcast_chunk(codes(j), c), q);
  } else {
    const __m256i abs_q = _mm256_sign_epi8(q, q);
    for (int j = 0; j < T; ++j) sums[j] = Dot::add4(sums[j], abs_q, _mm256_sign_epi8(broadcast_chunk(codes(j), c), q));
  }
}

// f(c) for the N chunks c of a block (Q8_0's and I8's eight registers,
// Q4_0's four of two nibbles each). Unrolled where the codes are biased:
// rolled, GCC copies the dpbusd accumulators between registers every
// iteration (unrolled measured 1.3x on Q8_0). Rolled for maddubs: unrolled,
// GCC reorders the int32 adds into a tree and spills the partial sums
// (measured 10% slower for Q8_0, 20% for Q4_0).
template <typename Dot, int N = 8, typename F>
inline void for_chunks(F f) {
  if constexpr (Dot::k_biased) {
#pragma GCC unroll 8
    for (int c = 0; c < N; ++c) f(c);
  } else {
#pragma GCC unroll 1
    for (int c = 0; c < N; ++c) f(c);
  }
}

// The exact sums from add_chunk_products' (128 x weight_sums out where the codes were biased).
template <int T, typename Dot>
inline void unbias(__m256i* sums, __m256i weight_sums) {
  if constexpr (Dot::k_biased) {
    const __m256i bias = _mm256_slli_epi32(weight_sums, 7);
    for (int j = 0; j < T; ++j) sums[j] = _mm256_sub_epi32(sums[j], bias);
  }
}

// Adds the block's int32 sums, scaled by row scale x token scale, to acc.
inline __m256 accumulate(__m256 acc, __m256 row_scales, const BlockQ8_0& a, __m256i sums) {
  const __m256 scale = _mm256_mul_ps(row_scales, _mm256_set1_ps(_cvtsh_ss(a.d)));
  return _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc);
}

// Q8_0 x Q8_0, eight rows a half: `Halves` halves of the group from h0 on
// in one pass over its blocks (the activations' chunks broadcast once for
// them all). maddubs and dpbusd want one unsigned operand: |w| or the biased
// codes (add_chunk_products).
template <int T, typename Dot, typename Group, int Halves>
void tile_q8_0(int64_t n_blocks, const uint8_t* group, int64_t h0, const uint8_t* act, int64_t act_stride, float* out,
               int64_t out_stride, const uint8_t* next) {
  const auto* w = reinterpret_cast<const Group*>(group);
  __m256 acc[Halves][T];
  for (auto& half : acc) for (int j = 0; j < T; ++j) half[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m256i sums[Halves][T], weight_sums[Halves];
    for (int h = 0; h < Halves; ++h) {
      weight_sums[h] = _mm256_setzero_si256();
      for (int j = 0; j < T; ++j) sums[h][j] = _mm256_setzero_si256();
    }
    prefetch_block<Group>(next, b);
    const auto codes = [&](int j) { return act_block(act, act_stride, j, b).qs; };
    for_chunks<Dot>([&](int c) {
      for (int h = 0; h < Halves; ++h) add_chunk_products<T, Dot>(load_chunk(w[b], h0 + h, c), c, codes, sums[h], weight_sums[h]);
    });
    for (int h = 0; h < Halves; ++h) {
      unbias<T, Dot>(sums[h], weight_sums[h]);
      const __m256 row_scales = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d + k_interleave * (h0 + h))));
      for (int j = 0; j < T; ++j) acc[h][j] = accumulate(acc[h][j], row_scales, act_block(act, act_stride, j, b), sums[h][j]);
    }
  }
  for (int h = 0; h < Halves; ++h) {
    for (int j = 0; j < T; ++j) _mm256_storeu_ps(out + j * out_stride + k_interleave * h, acc[h][j]);
  }
}

// I8 x I8 (W8A8): as Q8_0 without scales, so each (row, token) sums in one
// int32 lane over the whole row; the weights may hold -128 (|w| is then 128
// as an unsigned byte), the activations stay within ±127, and rows are at
// most k_max_i8_cols long, so no exact sum overflows. Writes the sums as floats.
template <int T, typename Dot, typename Group, int Halves>
void tile_i8(int64_t n_blocks, const uint8_t* group, int64_t h0, const uint8_t* act, int64_t act_stride, float* out,
             int64_t out_stride, const uint8_t* next) {
  const auto* w = reinterpret_cast<const Group*>(group);
  __m256i totals[Halves][T], weight_totals[Halves];
  for (int h = 0; h < Halves; ++h) {
    weight_totals[h] = _mm256_setzero_si256();
    for (int j = 0; j < T; ++j) totals[h][j] = _mm256_setzero_si256();
  }
  for (int64_t b = 0; b < n_blocks; ++b) {
    // Fresh sums per block, so that one block's chains of dependent adds
    // overlap the next block's (one chain over the whole row measured 26% slower).
    __m256i sums[Halves][T], weight_sums[Halves];
    for (int h = 0; h < Halves; ++h) {
      weight_sums[h] = _mm256_setzero_si256();
      for (int j = 0; j < T; ++j) sums[h][j] = _mm256_setzero_si256();
    }
    prefetch_block<Group>(next, b);
    const auto codes = [&](int j) { return reinterpret_cast<const int8_t*>(act + j * act_stride) + b * k_qk; };
    for_chunks<Dot>([&](int c) {
      for (int h = 0; h < Halves; ++h) add_chunk_products<T, Dot>(load_chunk(w[b], h0 + h, c), c, codes, sums[h], weight_sums[h]);
    });
    for (int h = 0; h < Halves; ++h) {
      for (int j = 0; j < T; ++j) totals[h][j] = _mm256_add_epi32(totals[h][j], sums[h][j]);
      weight_totals[h] = _mm256_add_epi32(weight_totals[h], weight_sums[h]);
    }
  }
  for (int h = 0; h < Halves; ++h) {
    unbias<T, Dot>(totals[h], weight_totals[h]);
    for (int j = 0; j < T; ++j) _mm256_storeu_ps(out + j * out_stride + k_interleave * h, _mm256_cvtepi32_ps(totals[h][j]));
  }
}

// The nibble types against Q8_0 (Q4_0, Q5_0) or Q8_1 (Q4_1, Q5_1)
// activations: the unsigned codes meet the activations as they are, a block
// at a time, in int16 pair sums of at most 2 x k_max_code x 127 (eight of
// Q4's or four of Q5's stay under 32767); then k_offset x sum(a) takes the
// offset back out (Q4_0, Q5_0), or the rows' m meet the activations' s
// (Q4_1, Q5_1).
template <int T, typename Dot, typename Group>
void tile_nibbles(int64_t n_blocks, const uint8_t* group, const uint8_t* act, int64_t act_stride, const int32_t* block_sums,
                  float* out, int64_t out_stride, const uint8_t* next) {
  using Act = typename Group::Act;
  constexpr bool k_fifth_bits = Group::k_max_code > 15;
  const auto* w = reinterpret_cast<const Group*>(group);
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F), fifth_bit = _mm256_set1_epi8(0x10);
  __m256 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    // The low and the high nibbles sum apart where the registers allow
    // (two chains of four dependent adds where one of eight left a token
    // latency-bound; VNNI: a group at one token 1.15x with its weights in
    // L2, pp512 1.07x; with AVX2's sixteen registers four tokens' second
    // chains spill: 1.4x slower), and always for Q5, whose eight int16 adds
    // in one chain could reach 62992.
    constexpr int k_chains = Dot::k_registers >= 32 || k_fifth_bits ? 2 : 1;
    __m256i sums[k_chains][T];
    for (auto& chain : sums)
      for (int j = 0; j < T; ++j) chain[j] = _mm256_setzero_si256();
    prefetch_block<Group>(next, b);
    // Q5's fifth bits of chunk v (interleaved_rows.h): bit 8i + v of a row's
    // word for its element 4v + i, bit 8i + 4 + v for 16 + 4v + i, shifted
    // onto bit 4 of byte i a chunk at a time.
    __m256i low_fifth = _mm256_setzero_si256(), high_fifth = _mm256_setzero_si256();
    if constexpr (k_fifth_bits) {
      high_fifth = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh));
      low_fifth = _mm256_slli_epi32(high_fifth, 4);
    }
    for_chunks<Dot, 4>([&](int v) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * v));
      __m256i low = _mm256_and_si256(packed, low_nibbles);
      __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
      if constexpr (k_fifth_bits) {
        low = _mm256_or_si256(low, _mm256_and_si256(low_fifth, fifth_bit));
        high = _mm256_or_si256(high, _mm256_and_si256(high_fifth, fifth_bit));
        low_fifth = _mm256_srli_epi32(low_fifth, 1);
        high_fifth = _mm256_srli_epi32(high_fifth, 1);
      }
      for (int j = 0; j < T; ++j) {
        const Act& a = act_block<Act>(act, act_stride, j, b);
        sums[0][j] = Dot::add_chunk(sums[0][j], low, broadcast_chunk(a.qs, v));
        sums[k_chains - 1][j] = Dot::add_chunk(sums[k_chains - 1][j], high, broadcast_chunk(a.qs, 4 + v));
      }
    });
    const __m256 row_scales = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d)));
    for (int j = 0; j < T; ++j) {
      const Act& a = act_block<Act>(act, act_stride, j, b);
      __m256i exact = Dot::to_int32(sums[0][j]);
      if constexpr (k_chains == 2) exact = _mm256_add_epi32(exact, Dot::to_int32(sums[1][j]));
      if constexpr (Group::k_offset != 0) {
        exact = _mm256_sub_epi32(exact, _mm256_set1_epi32(Group::k_offset * block_sums[j * n_blocks + b]));
        acc[j] = accumulate(acc[j], row_scales, a, exact);
      } else {
        const __m256 row_mins = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].m)));
        const __m256 scale = _mm256_mul_ps(row_scales, _mm256_set1_ps(_cvtsh_ss(a.d)));
        acc[j] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(exact), acc[j]);
        acc[j] = _mm256_fmadd_ps(row_mins, _mm256_set1_ps(_cvtsh_ss(a.s)), acc[j]);
      }
    }
  }
  for (int j = 0; j < T; ++j) _mm256_storeu_ps(out + j * out_stride, acc[j]);
}

// MXFP4 x Q8_0: each code becomes its doubled E2M1 value plus 12, an
// unsigned byte of 0..24, through a table lookup, and meets the activations
// as they are; 12 * sum(a) takes the offset back out, and the rows' halved
// E8M0 scales (mxfp4_half_scale, eight at once) undo the doubling. The low
// and the high nibbles sum apart: four int16 pair sums of at most 2 x 24 x
// 127 stay under 32767, eight would not.
inline __m256 mxfp4_row_scales(const uint8_t* e) {
  const __m256i exponents = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(exponents, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), exponents);
  const __m256i is_normal = _mm256_cmpgt_epi32(exponents, _mm256_set1_epi32(1));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(subnormal, normal, is_normal));
}

constexpr int k_mxfp4_offset = 12;
struct alignas(16) Mxfp4OffsetValues {
  int8_t v[16];
};
constexpr Mxfp4OffsetValues mxfp4_offset_values() {
  Mxfp4OffsetValues out{};
  for (int i = 0; i < 16; ++i) out.v[i] = int8_t(k_mxfp4_values[i] + k_mxfp4_offset);
  return out;
}
constexpr Mxfp4OffsetValues k_mxfp4_offset_values = mxfp4_offset_values();

template <int T, typename Dot>
void tile_mxfp4(int64_t n_blocks, const uint8_t* group, const uint8_t* act, int64_t act_stride, const int32_t* block_sums,
                float* out, int64_t out_stride, const uint8_t* next) {
  const auto* w = reinterpret_cast<const GroupMxfp4*>(group);
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
  const __m256i values = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(k_mxfp4_offset_values.v)));
  __m256 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m256i sums[T];
    for (int j = 0; j < T; ++j) sums[j] = _mm256_setzero_si256();
    prefetch_block<GroupMxfp4>(next, b);
    for (int half = 0; half < 2; ++half) {
      __m256i half_sums[T];
      for (int j = 0; j < T; ++j) half_sums[j] = _mm256_setzero_si256();
      for_chunks<Dot, 4>([&](int v) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * v));
        const __m256i codes = _mm256_and_si256(half ? _mm256_srli_epi16(packed, 4) : packed, low_nibbles);
        const __m256i u = _mm256_shuffle_epi8(values, codes);
        for (int j = 0; j < T; ++j) {
          half_sums[j] = Dot::add_chunk(half_sums[j], u, broadcast_chunk(act_block(act, act_stride, j, b).qs, 4 * half + v));
        }
      });
      for (int j = 0; j < T; ++j) sums[j] = _mm256_add_epi32(sums[j], Dot::to_int32(half_sums[j]));
    }
    const __m256 row_scales = mxfp4_row_scales(w[b].e);
    for (int j = 0; j < T; ++j) {
      const __m256i exact = _mm256_sub_epi32(sums[j], _mm256_set1_epi32(k_mxfp4_offset * block_sums[j * n_blocks + b]));
      acc[j] = accumulate(acc[j], row_scales, act_block(act, act_stride, j, b), exact);
    }
  }
  for (int j = 0; j < T; ++j) _mm256_storeu_ps(out + j * out_stride, acc[j]);
}

// Q8_0 (Group = GroupQ8_0) or I8 (GroupI8): the two tiles read no block
// sums. A 16-row group's two halves of eight rows go through together in
// tiles of up to two tokens (decode: one pass over the weights, as an 8-row
// group's), one after the other in larger ones (their accumulators would
// not fit the registers).
template <typename Group, typename Dot>
void group_int8(int64_t n_blocks, const uint8_t* group, const uint8_t* act, int64_t act_stride, const int32_t*,
                int64_t n_tokens, float* out, int64_t out_stride) {
  constexpr int k_halves = int(Group::k_rows / k_interleave);
  const uint8_t* next = group_to_prefetch<Group>(group, n_blocks);
  for_tiles_of_four(n_tokens, [&](auto tile, int64_t t) {
    constexpr int k_together = tile.value <= 2 ? k_halves : 1;
    for (int64_t h0 = 0; h0 < k_halves; h0 += k_together) {
      float* tile_out = out + t * out_stride + k_interleave * h0;
      const uint8_t* tile_next = t == 0 && h0 == 0 ? next : nullptr;
      if constexpr (std::is_same_v<Group, GroupI8<Group::k_rows>>) {
        tile_i8<tile.value, Dot, Group, k_together>(n_blocks, group, h0, act + t * act_stride, act_stride, tile_out, out_stride, tile_next);
      } else {
        tile_q8_0<tile.value, Dot, Group, k_together>(n_blocks, group, h0, act + t * act_stride, act_stride, tile_out, out_stride,
                                                      tile_next);
      }
    }
  });
}

// The Q8_0 or I8 kernel for the rows of the type's groups (interleaved_group_rows).
template <DType Type, typename Dot>
InterleavedGroupFn int8_group_kernel() {
  const bool tile_rows = interleaved_group_rows(Type) == k_amx_tile_rows;
  if constexpr (Type == DType::q8_0) return tile_rows ? group_int8<GroupQ8_0<16>, Dot> : group_int8<GroupQ8_0<8>, Dot>;
  else return tile_rows ? group_int8<GroupI8<16>, Dot> : group_int8<GroupI8<8>, Dot>;
}

// Q4_0, Q5_0, Q4_1 or Q5_1 (Group): only the first two read block sums.
template <typename Group, typename Dot>
void group_nibbles(int64_t n_blocks, const uint8_t* group, const uint8_t* act, int64_t act_stride, const int32_t* block_sums,
                   int64_t n_tokens, float* out, int64_t out_stride) {
  const uint8_t* next = group_to_prefetch<Group>(group, n_blocks);
  for_tiles_of_four(n_tokens, [&](auto tile, int64_t t) {
    const int32_t* tile_sums = Group::k_offset != 0 ? block_sums + t * n_blocks : nullptr;
    tile_nibbles<tile.value, Dot, Group>(n_blocks, group, act + t * act_stride, act_stride, tile_sums, out + t * out_stride,
                                         out_stride, t == 0 ? next : nullptr);
  });
}

template <typename Dot>
void group_mxfp4(int64_t n_blocks, const uint8_t* group, const uint8_t* act, int64_t act_stride, const int32_t* block_sums,
                 int64_t n_tokens, float* out, int64_t out_stride) {
  const uint8_t* next = group_to_prefetch<GroupMxfp4>(group, n_blocks);
  for_tiles_of_four(n_tokens, [&](auto tile, int64_t t) {
    tile_mxfp4<tile.value, Dot>(n_blocks, group, act + t * act_stride, act_stride, block_sums + t * n_blocks,
                                out + t * out_stride, out_stride, t == 0 ? next : nullptr);
  });
}

}  // namespace
}  // namespace ds
