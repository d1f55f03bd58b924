// The K types' tiles on AMX (interleaved_rows.h): Q4_K, Q5_K and Q6_K
// against Q8_K activations, bit for bit the AVX2 kernel's outputs (tested).
//
// A super-block's integer sum is sum over sub-blocks s of scale_s x (codes .
// activations of s). The scales differ per row and sub-block, which a tile
// product cannot apply, but they split into digits small enough that code x
// digit still fits a byte: scale = base x high + low, so the sum is base x
// (the products of the codes times the high digits) + (of the low ones): two
// plain dot products over the whole super-block, four tdpbsud of 64 codes
// each, the scales folded into the weight bytes. Q4_K's codes (0..15) take
// base 16 (digits 0..3 and 0..15: products up to 225 as unsigned bytes),
// Q5_K's (0..31) base 8 (digits 0..7: up to 217). Q6_K's codes go in signed
// (stored value less 32: -32..31, which folds the AVX2 kernel's separate 32 x
// sum(scale x activation sums) into the products) and its signed 8-bit scales
// in three balanced base-7 digits (-3..3: products within ±96, tdpbssd).
// Every integer is exact, so the sum equals the AVX2 kernel's, and the float
// part (d x sum - dmin x the mins' sum, times the token's scale, added to the
// output; Q4_K's and Q5_K's mins from the activations' sub-block sums, as
// there) is that kernel's operation for operation.
//
// As for the other types, the weights keep the interleaved layout and each
// run of four groups is re-laid per call into the tiles' B operand (codes
// times digits, per digit), shared by every tile of tokens. Compiled with
// AMX-TILE, AMX-INT8 and AVX-512; only called when use_amx_kernels().

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/amx_tiles_x86.h"
#include "kernels/interleaved_k_groups_x86.h"

// GCC 12 flags the undefined pass-through operand inside its own AVX-512
// intrinsics (_mm512_undefined_*) as uninitialized: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ds {
namespace {

constexpr int64_t k_unit_rows = k_amx_run_rows;                     // two tiles of rows
constexpr int64_t k_unit_groups = k_unit_rows / k_interleave;
constexpr int k_depth = 64;                                        // codes per product
constexpr int k_products = k_qk_k / k_depth;                       // per super-block and digit
constexpr int64_t k_w_tile_bytes = 16 * k_depth;                   // 16 rows x 64 codes
constexpr int64_t k_a_tile_bytes = k_tile_tokens * k_depth;        // 16 tokens x 64 codes

template <typename Group>
struct KTiles {
  static constexpr bool k_q6 = std::is_same_v<Group, GroupQ6_K>;
  static constexpr bool k_mins = !k_q6;
  static constexpr int k_sub_block = k_q6 ? 16 : 32;  // elements under one scale
  static constexpr int k_sub_blocks = k_qk_k / k_sub_block;
  static constexpr int k_digits = k_q6 ? 3 : 2;
  static constexpr int k_base = k_q6 ? 7 : std::is_same_v<Group, GroupQ4_K> ? 16 : 8;
};

// The digits of every scale byte in the type's base, lowest first, each
// repeated in the four bytes of a 32-bit lane (a row's four codes of a
// chunk): Q4_K's and Q5_K's unsigned 6-bit scales in plain digits, Q6_K's
// signed bytes in balanced digits of -3..3 (three of them reach ±171).
template <typename Group>
struct ScaleDigits {
  uint32_t lanes[KTiles<Group>::k_digits][256];
};

template <typename Group>
constexpr ScaleDigits<Group> scale_digits() {
  using T = KTiles<Group>;
  ScaleDigits<Group> out{};
  for (int byte = 0; byte < 256; ++byte) {
    int scale = T::k_q6 ? int(int8_t(byte)) : byte;
    for (int c = 0; c < T::k_digits; ++c) {
      int d = scale % T::k_base;
      if (T::k_q6 && d > 3) d -= T::k_base;
      if (T::k_q6 && d < -3) d += T::k_base;
      out.lanes[c][byte] = uint32_t(uint8_t(int8_t(d))) * 0x01010101u;
      scale = (scale - d) / T::k_base;
    }
  }
  return out;
}

template <typename Group>
constexpr ScaleDigits<Group> k_scale_digits = scale_digits<Group>();

// Every scale the type can hold (Q4_K's and Q5_K's 0..63, Q6_K's -128..127)
// comes back from its digits, and every code times a digit fits the weight
// byte (unsigned for Q4_K's 0..15 and Q5_K's 0..31, signed for Q6_K's -32..31).
template <typename Group>
constexpr bool digits_hold_every_scale() {
  using T = KTiles<Group>;
  const int max_code = std::is_same_v<Group, GroupQ4_K> ? 15 : 31, byte_max = T::k_q6 ? 127 : 255;
  for (int scale = T::k_q6 ? -128 : 0; scale <= (T::k_q6 ? 127 : 63); ++scale) {
    int value = 0, power = 1;
    for (int c = 0; c < T::k_digits; ++c, power *= T::k_base) {
      const int digit = T::k_q6 ? int(int8_t(k_scale_digits<Group>.lanes[c][uint8_t(scale)])) : int(k_scale_digits<Group>.lanes[c][scale] & 0xFF);
      if ((T::k_q6 ? 32 : max_code) * (digit < 0 ? -digit : digit) > byte_max) return false;
      value += digit * power;
    }
    if (value != scale) return false;
  }
  return true;
}
static_assert(digits_hold_every_scale<GroupQ4_K>() && digits_hold_every_scale<GroupQ5_K>() && digits_hold_every_scale<GroupQ6_K>(),
              "the scale digits must rebuild every scale, and code x digit fit a byte");

// A run of up to four groups re-laid for the tiles, in the calling thread's
// scratch. Super-block b, digit c, product p (codes 64p..64p+63): two B tiles
// (rows 0-15, 16-31), each 16 tile rows of 16 rows x 4 codes x digits, at
// codes + ((b * digits + c) * 4 + p) * 2 * k_w_tile_bytes. Q4_K and Q5_K:
// the rows' mins of sub-blocks 2p and 2p + 1 as int16 pairs at mins + ((b *
// 4 + p) * 32 + row) * 2. d and dmin as floats at b * 32 + row. Rows past
// the run's groups: all 0.
struct KUnit {
  int8_t* codes;
  int16_t* mins;
  float* d;
  float* dmin;
};

template <typename Group>
KUnit k_unit_scratch(int64_t n_blocks) {
  constexpr int64_t codes = KTiles<Group>::k_digits * k_qk_k * k_unit_rows, mins = 4 * k_unit_rows * 2 * 2, floats = k_unit_rows * 4;
  uint8_t* bytes = interleaved_scratch(size_t(n_blocks * (codes + mins + 2 * floats)));
  const int64_t mins_at = n_blocks * codes, d_at = mins_at + n_blocks * mins, dmin_at = d_at + n_blocks * floats;
  return {reinterpret_cast<int8_t*>(bytes), reinterpret_cast<int16_t*>(bytes + mins_at), reinterpret_cast<float*>(bytes + d_at),
          reinterpret_cast<float*>(bytes + dmin_at)};
}

// Each byte's product with the matching byte of `digits` (products that fit
// a byte: their low eight bits, signed or not).
inline __m256i multiply_bytes(__m256i codes, __m256i digits) {
  const __m256i even = _mm256_mullo_epi16(codes, digits);
  const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(codes, 8), _mm256_srli_epi16(digits, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00FF)), _mm256_slli_epi16(odd, 8));
}

// Group u's eight rows of super-block b: chunk k (codes 4k..4k+3 of each
// row, byte 4r + i) times each digit of its sub-block's scales, where its
// tile row lies (product k / 16, row k % 16, tile u / 2, half u % 2).
template <typename Group>
class GroupPlacer {
 public:
  using T = KTiles<Group>;
  // scales[s][r]: row r's scale of sub-block s, as a byte.
  GroupPlacer(const KUnit& unit, int64_t b, int64_t u, const uint8_t (&scales)[T::k_sub_blocks][k_interleave])
      : unit_(unit), b_(b), u_(u) {
    for (int s = 0; s < T::k_sub_blocks; ++s) {
      const __m256i index = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales[s])));
      for (int c = 0; c < T::k_digits; ++c) {
        digits_[s][c] = _mm256_i32gather_epi32(reinterpret_cast<const int*>(k_scale_digits<Group>.lanes[c]), index, 4);
      }
    }
  }
  void put(int k, __m256i codes) const {
    const int s = 4 * k / T::k_sub_block;
    for (int c = 0; c < T::k_digits; ++c) {
      int8_t* tile = unit_.codes + (((b_ * T::k_digits + c) * k_products + k / 16) * 2 + u_ / 2) * k_w_tile_bytes;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(tile + 64 * (k % 16) + 32 * (u_ % 2)), multiply_bytes(codes, digits_[s][c]));
    }
  }

 private:
  const KUnit& unit_;
  int64_t b_, u_;
  __m256i digits_[T::k_sub_blocks][T::k_digits];
};

template <typename Group>
void put_group(const Group* w, const KUnit& unit, int64_t b, int64_t u) {
  using T = KTiles<Group>;
  const int64_t row0 = 8 * u;
  alignas(16) uint8_t scales[T::k_sub_blocks][k_interleave] = {};
  const __m256 d = w ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w->d))) : _mm256_setzero_ps();
  _mm256_storeu_ps(unit.d + b * k_unit_rows + row0, d);
  if constexpr (T::k_mins) {
    const __m256 dmin = w ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w->dmin))) : _mm256_setzero_ps();
    _mm256_storeu_ps(unit.dmin + b * k_unit_rows + row0, dmin);
    for (int64_t r = 0; r < k_interleave; ++r) {
      uint8_t packed[k_scale_bytes_k] = {}, row_scales[8], mins[8];
      for (int j = 0; w && j < k_scale_bytes_k; ++j) packed[j] = w->scales[j][r];
      k_scales_mins(packed, row_scales, mins);
      for (int s = 0; s < 8; ++s) scales[s][r] = row_scales[s];
      for (int p = 0; p < 4; ++p) {
        int16_t* pair = unit.mins + ((b * 4 + p) * k_unit_rows + row0 + r) * 2;
        pair[0] = mins[2 * p], pair[1] = mins[2 * p + 1];
      }
    }
  } else {
    if (w) std::memcpy(scales, w->scales, sizeof(scales));
  }
  const GroupPlacer<Group> placer(unit, b, u, scales);
  if (!w) {
    for (int k = 0; k < k_qk_k / 4; ++k) placer.put(k, _mm256_setzero_si256());
  } else if constexpr (T::k_mins) {
    for (int pair = 0; pair < 4; ++pair) {
      // Elements 64 pair + 4c + i: sub-block 2 pair (chunk 16 pair + c) low, 2 pair + 1 (chunk 16 pair + 8 + c) high.
      for (int c = 0; c < 8; ++c) {
        __m256i low, high;
        k_chunk_codes(*w, pair, c, low, high);
        placer.put(16 * pair + c, low);
        placer.put(16 * pair + 8 + c, high);
      }
    }
  } else {
    const __m256i offset = _mm256_set1_epi8(32);
    for (int i = 0; i < 16; i += 2) {
      for (int q = 0; q < 4; ++q) {
        __m256i c0, c1;
        q6_k_chunk_codes(*w, i, q, c0, c1);
        placer.put(16 * q + i, _mm256_sub_epi8(c0, offset));
        placer.put(16 * q + i + 1, _mm256_sub_epi8(c1, offset));
      }
    }
  }
}

template <typename Group>
KUnit prepare_k_unit(int64_t n_groups, int64_t n_blocks, const uint8_t* groups) {
  const KUnit unit = k_unit_scratch<Group>(n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int64_t u = 0; u < k_unit_groups; ++u) {
      put_group<Group>(u < n_groups ? reinterpret_cast<const Group*>(groups + u * n_blocks * int64_t(sizeof(Group))) + b : nullptr, unit, b, u);
    }
  }
  return unit;
}

template <int Base>
inline __m512i times_base(__m512i x) {
  if constexpr (Base == 16) return _mm512_slli_epi32(x, 4);
  else if constexpr (Base == 8) return _mm512_slli_epi32(x, 3);
  else return _mm512_sub_epi32(_mm512_slli_epi32(x, 3), x);  // 7
}

// Super-block b of a prepared run against TokenTiles (1 or 2) tiles of 16
// tokens (their tile-ready codes at `act`, the second tile act_tile_stride
// on; their Q8_K rows at `rows`): each digit's products over the whole
// super-block in the tiles, then per output the digits' sums combined into
// the exact integer sum, and its float part added to the output (the run's
// n_rows columns of out + t * out_stride).
template <typename Group, int TokenTiles>
void k_superblock_tiles(const KUnit& unit, int64_t b, int64_t n_rows, const int8_t* act, int64_t act_tile_stride, const uint8_t* rows,
                        int64_t row_stride, float* out, int64_t out_stride) {
  using T = KTiles<Group>;
  const int row_tiles = n_rows > k_tile_tokens ? 2 : 1;
  alignas(64) int32_t digit_sums[T::k_digits][4][k_tile_sums];
  for (int c = 0; c < T::k_digits; ++c) {
    zero_sums<TokenTiles>();
    for (int p = 0; p < k_products; ++p) {
      multiply_tiles<TokenTiles, T::k_mins>(act + p * k_a_tile_bytes, act_tile_stride, k_depth,
                                            unit.codes + ((b * T::k_digits + c) * k_products + p) * 2 * k_w_tile_bytes, k_w_tile_bytes);
    }
    store_sums<TokenTiles>(digit_sums[c]);
  }
  for (int t = 0; t < TokenTiles * k_tile_tokens; ++t) {
    const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(rows + t * row_stride)[b];
    __m512i pair_sums[4];  // the activation sums of sub-blocks 2p and 2p + 1, as an int16 pair
    for (int p = 0; T::k_mins && p < 4; ++p) {
      const int16_t lo = int16_t(a.bsums[4 * p] + a.bsums[4 * p + 1]), hi = int16_t(a.bsums[4 * p + 2] + a.bsums[4 * p + 3]);
      pair_sums[p] = _mm512_set1_epi32(int32_t(uint16_t(lo)) | (int32_t(uint16_t(hi)) << 16));
    }
    for (int i = 0; i < row_tiles; ++i) {
      const int tile = 2 * (t / k_tile_tokens) + i, at = k_tile_tokens * (t % k_tile_tokens);
      // The exact sum: the digits' sums, highest first, each step times the base.
      __m512i sum = _mm512_load_si512(digit_sums[T::k_digits - 1][tile] + at);
      for (int c = T::k_digits - 2; c >= 0; --c) sum = _mm512_add_epi32(times_base<T::k_base>(sum), _mm512_load_si512(digit_sums[c][tile] + at));
      __m512 inner = _mm512_mul_ps(_mm512_loadu_ps(unit.d + b * k_unit_rows + k_tile_tokens * i), _mm512_cvtepi32_ps(sum));
      if constexpr (T::k_mins) {
        __m512i min_sums = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) {
          const __m512i mins = _mm512_loadu_si512(unit.mins + ((b * 4 + p) * k_unit_rows + k_tile_tokens * i) * 2);
          min_sums = _mm512_add_epi32(min_sums, _mm512_madd_epi16(mins, pair_sums[p]));
        }
        const __m512 dmin = _mm512_loadu_ps(unit.dmin + b * k_unit_rows + k_tile_tokens * i);
        inner = _mm512_sub_ps(inner, _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(min_sums)));
      }
      // Only the run's rows: the columns past them belong to the next run (another thread's, maybe).
      const int64_t valid = std::min<int64_t>(k_tile_tokens, n_rows - k_tile_tokens * i);
      const __mmask16 mask = __mmask16((1u << valid) - 1);
      float* o = out + t * out_stride + k_tile_tokens * i;
      _mm512_mask_storeu_ps(o, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, o), _mm512_mul_ps(_mm512_set1_ps(a.d), inner)));
    }
  }
}

// Super-blocks outer, tokens inner: one super-block's re-laid weights (16 KB,
// Q6_K's 24) stay in L1 while every tile of tokens meets them; the outputs
// accumulate in place, super-blocks in order, from 0 (as the AVX2 kernel's).
template <typename Group>
void tiles_amx_k(int64_t n_groups, int64_t n_blocks, const uint8_t* groups, const TileActivations& act, int64_t n_tokens, float* out,
                 int64_t out_stride) {
  use_tile_shape(k_depth, k_tile_tokens);
  const int64_t group_bytes = n_blocks * int64_t(sizeof(Group)), token_tile_bytes = n_blocks * k_products * k_a_tile_bytes;
  for (int64_t g = 0; g < n_groups; g += k_unit_groups) {
    const int64_t run_groups = std::min(k_unit_groups, n_groups - g), n_rows = run_groups * k_interleave;
    const KUnit unit = prepare_k_unit<Group>(run_groups, n_blocks, groups + g * group_bytes);
    float* run_out = out + g * k_interleave;
    for (int64_t t = 0; t < n_tokens; ++t) std::memset(run_out + t * out_stride, 0, size_t(n_rows) * sizeof(float));
    for (int64_t b = 0; b < n_blocks; ++b) {
      for (int64_t t = 0; t < n_tokens;) {
        const int8_t* tiles = act.codes + t / k_tile_tokens * token_tile_bytes + b * k_products * k_a_tile_bytes;
        const uint8_t* rows = act.rows + t * act.row_stride;
        if (t + 2 * k_tile_tokens <= n_tokens) {
          k_superblock_tiles<Group, 2>(unit, b, n_rows, tiles, token_tile_bytes, rows, act.row_stride, run_out + t * out_stride, out_stride);
          t += 2 * k_tile_tokens;
        } else {
          k_superblock_tiles<Group, 1>(unit, b, n_rows, tiles, token_tile_bytes, rows, act.row_stride, run_out + t * out_stride, out_stride);
          t += k_tile_tokens;
        }
      }
    }
  }
}

}  // namespace

InterleavedTilesFn interleaved_tiles_amx_k(DType type) {
  switch (type) {
    case DType::q4_k: return tiles_amx_k<GroupQ4_K>;
    case DType::q5_k: return tiles_amx_k<GroupQ5_K>;
    case DType::q6_k: return tiles_amx_k<GroupQ6_K>;
    default: return nullptr;
  }
}

}  // namespace ds
