// The Q8_0, Q4_0, MXFP4 and I8 tiles on AMX (interleaved_rows.h): each
// tdpbssd multiplies 16 tokens' block of 32 codes by 16 rows' into a 16 x 16
// tile of exact int32 sums, 8,192 multiply-adds in one instruction where
// VNNI's dpbusd does 32. Two tiles of tokens meet two tiles of rows per block
// (four products for four tile loads: a load of 16 rows costs about what a
// product does). Every block's sum is exact and its float part (row scale x
// token scale, times the sum, added into one accumulator per output, blocks
// in order) is the VNNI tiles' operation for operation, so the outputs equal
// theirs bit for bit (tested).
//
// Q8_0's and I8's 16-row groups are the tiles' B operand as they lie (row c
// of a tile: codes 4c..4c+3 of 16 rows), loaded straight from the weights,
// two groups a unit of 32 rows. Q4_0's and MXFP4's nibbles must be widened
// to int8 first: per call, each run of four 8-row groups is re-laid block by
// block into the B layout (two groups' chunk c side by side) and shared by
// every tile of tokens. Compiled with AMX-TILE, AMX-INT8 and AVX-512; only
// called when use_amx_kernels().

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/amx_tiles_x86.h"
#include "kernels/interleaved_tiles_x86.h"

// GCC 12 flags the undefined pass-through operand inside its own AVX-512
// intrinsics (_mm512_undefined_*) as uninitialized: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ds {
namespace {

constexpr int k_tokens = k_tile_tokens;
constexpr int64_t k_unit_rows = k_amx_run_rows;  // rows multiplied together: two tiles
constexpr int64_t k_relaid_groups = k_unit_rows / k_interleave;  // 8-row groups re-laid together
constexpr int64_t k_b_tile_bytes = 8 * 64;  // a block of 16 rows: 8 tile rows of 16 x 4 codes
constexpr int64_t k_a_tile_bytes = k_tokens * k_qk;  // a block of 16 tokens' codes

// Tokens in the activation and sums tiles: 16, or fewer for a step of fewer
// tokens (a row of a tile product depends only on that row's operands).
constexpr TileConfig tile_config(int depth, int token_rows) {
  TileConfig c;
  for (int tile : {DS_SUMS00, DS_SUMS01, DS_SUMS10, DS_SUMS11}) c.rows[tile] = uint8_t(token_rows), c.bytes_per_row[tile] = 64;
  for (int tile : {DS_ACT0, DS_ACT1}) c.rows[tile] = uint8_t(token_rows), c.bytes_per_row[tile] = uint16_t(depth);
  for (int tile : {DS_W0, DS_W1}) c.rows[tile] = uint8_t(depth / 4), c.bytes_per_row[tile] = 64;
  return c;
}

struct TileConfigs {
  TileConfig depth32, depth64[k_tile_tokens];  // depth 64: by tokens less one
};

constexpr TileConfigs tile_configs() {
  TileConfigs c;
  c.depth32 = tile_config(32, k_tile_tokens);
  for (int rows = 1; rows <= k_tile_tokens; ++rows) c.depth64[rows - 1] = tile_config(64, rows);
  return c;
}

constexpr TileConfigs k_tile_configs = tile_configs();

}  // namespace

// The configuration is per thread: each loads it before its first tile, and
// again where a kernel of another shape ran last.
void use_tile_shape(int depth, int token_rows) {
  thread_local const TileConfig* loaded = nullptr;
  const TileConfig* wanted = depth == 64 ? &k_tile_configs.depth64[token_rows - 1] : &k_tile_configs.depth32;
  if (loaded == wanted) return;
  _tile_loadconfig(wanted);
  loaded = wanted;
}

namespace {

// Up to 32 rows as the tiles read them: block b's B tile of row tile i at
// codes + b * block_stride + i * second_tile (second_tile 0 where the unit
// has one tile of rows), its 16 row scales as floats at row_scales + b * 32
// + 16 i where re-laid, or in place as the 16-row group's f16 scales at
// f16_scales + b * block_stride + i * second_tile (I8: neither).
struct Unit {
  const int8_t* codes;
  int64_t block_stride, second_tile;
  const float* row_scales;
  const uint8_t* f16_scales;
};

inline __m512 unit_row_scales(const Unit& unit, int64_t b, int i) {
  if (unit.row_scales) return _mm512_loadu_ps(unit.row_scales + b * k_unit_rows + k_tokens * i);
  const uint8_t* scales = unit.f16_scales + b * unit.block_stride + i * unit.second_tile;
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
}

// A Q8_0 or I8 unit: up to two 16-row groups, group_bytes apart, in place.
template <typename Group>
Unit unit_in_place(int64_t n_groups, const uint8_t* groups, int64_t group_bytes) {
  constexpr bool k_scales = !std::is_same_v<Group, GroupI8<k_amx_tile_rows>>;
  const auto* codes = reinterpret_cast<const int8_t*>(groups + (k_scales ? k_amx_tile_rows * sizeof(uint16_t) : 0));
  return {codes, int64_t(sizeof(Group)), n_groups > 1 ? group_bytes : 0, nullptr, k_scales ? groups : nullptr};
}

// Four 8-row groups re-laid for the tiles, in the calling thread's scratch:
// block b's two B tiles at codes + b * 2 * k_b_tile_bytes, its 32 row
// scales at row_scales + b * 32 (rows past the unit's groups: codes and
// scales 0).
struct ReLaid {
  int8_t* codes;
  float* row_scales;
};

ReLaid relaid_scratch(int64_t n_blocks) {
  uint8_t* bytes = interleaved_scratch(size_t(n_blocks) * (2 * k_b_tile_bytes + k_unit_rows * sizeof(float)));
  return {reinterpret_cast<int8_t*>(bytes), reinterpret_cast<float*>(bytes + n_blocks * 2 * k_b_tile_bytes)};
}

// Where group u of a unit puts chunk c of block b: its tile (u / 2), the
// tile row c, the half (u % 2) of that row.
inline int8_t* chunk_at(const ReLaid& unit, int64_t b, int64_t u, int c) {
  return unit.codes + b * 2 * k_b_tile_bytes + (u / 2) * k_b_tile_bytes + 64 * c + 32 * (u % 2);
}

// Q4_0 and MXFP4 nibbles (byte 32v + 4r + i: row r's elements 4v + i, low,
// and 16 + 4v + i, high) widened to values[code], chunk c at chunk_at(.., c).
void widen_nibbles(const uint8_t* packed, __m256i values, const ReLaid& unit, int64_t b, int64_t u) {
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
  for (int v = 0; v < 4; ++v) {
    const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + 32 * v));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(chunk_at(unit, b, u, v)), _mm256_shuffle_epi8(values, _mm256_and_si256(p, low_nibbles)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(chunk_at(unit, b, u, 4 + v)),
                        _mm256_shuffle_epi8(values, _mm256_and_si256(_mm256_srli_epi16(p, 4), low_nibbles)));
  }
}

// Q8_0 and I8 in 16-row groups (where AMX runs), read in place; Q4_0 and MXFP4 in 8-row groups, re-laid.
template <DType Type>
using GroupOf = std::conditional_t<
    Type == DType::q8_0, GroupQ8_0<k_amx_tile_rows>,
    std::conditional_t<Type == DType::q4_0, GroupQ4_0, std::conditional_t<Type == DType::mxfp4, GroupMxfp4, GroupI8<k_amx_tile_rows>>>>;
template <DType Type>
constexpr bool k_in_place = Type == DType::q8_0 || Type == DType::i8;

template <DType Type>
Unit relaid_unit(int64_t n_groups, int64_t n_blocks, const uint8_t* groups) {
  using Group = GroupOf<Type>;
  const ReLaid unit = relaid_scratch(n_blocks);
  alignas(16) int8_t table[16];
  for (int i = 0; i < 16; ++i) table[i] = Type == DType::mxfp4 ? k_mxfp4_values[i] : int8_t(i - 8);
  const __m256i values = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int64_t u = 0; u < k_relaid_groups; ++u) {
      float* scales = unit.row_scales + b * k_unit_rows + u * k_interleave;
      if (u >= n_groups) {
        for (int c = 0; c < 8; ++c) std::memset(chunk_at(unit, b, u, c), 0, 32);
        _mm256_storeu_ps(scales, _mm256_setzero_ps());
        continue;
      }
      const Group& w = reinterpret_cast<const Group*>(groups + u * n_blocks * int64_t(sizeof(Group)))[b];
      widen_nibbles(w.qs, values, unit, b, u);
      if constexpr (Type == DType::mxfp4) _mm256_storeu_ps(scales, mxfp4_row_scales(w.e));
      else _mm256_storeu_ps(scales, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.d))));
    }
  }
  return {unit.codes, 2 * k_b_tile_bytes, k_b_tile_bytes, unit.row_scales, nullptr};
}

// acc[t * acc_stride + r] += (row scale x token scale) x sum, for the 16 x
// 16 sums of a tile of tokens against a tile of rows (sums: token-major), as
// accumulate() in interleaved_tiles_x86.h forms each output.
inline void accumulate_tile(const int32_t* sums, __m512 rows, const float* token_scales, float* acc, int64_t acc_stride) {
  for (int t = 0; t < k_tokens; ++t) {
    const __m512 scale = _mm512_mul_ps(rows, _mm512_set1_ps(token_scales[t]));
    float* a = acc + t * acc_stride;
    _mm512_store_ps(a, _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(_mm512_load_si512(sums + k_tokens * t)), _mm512_load_ps(a)));
  }
}

// Writes tokens' rows [0, n_rows) of the unit.
inline void store_rows(const float (*acc)[k_unit_rows], int n_tokens, int64_t n_rows, float* out, int64_t out_stride) {
  for (int t = 0; t < n_tokens; ++t) std::memcpy(out + t * out_stride, acc[t], size_t(n_rows) * sizeof(float));
}

// TokenTiles (1 or 2) tiles of 16 tokens (their tile-ready codes at `act`)
// against a unit. The block types scale each block's sums into
// float accumulators; I8 sums every block in the tiles.
template <DType Type, int TokenTiles>
void unit_tiles(int64_t n_blocks, const Unit& unit, int64_t n_rows, const int8_t* act, const float* block_scales,
                int64_t scale_stride, float* out, int64_t out_stride) {
  constexpr bool k_float_part = Type != DType::i8;
  alignas(64) float acc[2 * k_tokens][k_unit_rows];
  alignas(64) int32_t sums[4][k_tile_sums];
  for (auto& row : acc) {
    for (int i = 0; i < k_unit_rows; i += k_tokens) _mm512_store_ps(row + i, _mm512_setzero_ps());
  }
  if constexpr (!k_float_part) zero_sums<TokenTiles>();
  for (int64_t b = 0; b < n_blocks; ++b) {
    if constexpr (k_float_part) zero_sums<TokenTiles>();
    multiply_tiles<TokenTiles>(act + b * k_a_tile_bytes, n_blocks * k_a_tile_bytes, k_qk, unit.codes + b * unit.block_stride,
                               unit.second_tile);
    if constexpr (k_float_part) {
      store_sums<TokenTiles>(sums);
      const __m512 rows0 = unit_row_scales(unit, b, 0);
      const float* tokens = block_scales + b * scale_stride;
      for (int j = 0; j < TokenTiles; ++j) accumulate_tile(sums[2 * j], rows0, tokens + k_tokens * j, acc[k_tokens * j], k_unit_rows);
      if (n_rows > k_tokens) {
        const __m512 rows1 = unit_row_scales(unit, b, 1);
        for (int j = 0; j < TokenTiles; ++j) {
          accumulate_tile(sums[2 * j + 1], rows1, tokens + k_tokens * j, acc[k_tokens * j] + k_tokens, k_unit_rows);
        }
      }
    }
  }
  if constexpr (!k_float_part) {
    store_sums<TokenTiles>(sums);
    for (int j = 0; j < TokenTiles; ++j) {
      for (int t = 0; t < k_tokens; ++t) {
        for (int i = 0; i < 2; ++i) {
          _mm512_store_ps(acc[k_tokens * j + t] + k_tokens * i, _mm512_cvtepi32_ps(_mm512_load_si512(sums[2 * j + i] + k_tokens * t)));
        }
      }
    }
  }
  store_rows(acc, TokenTiles * k_tokens, n_rows, out, out_stride);
}

template <DType Type>
void tiles_amx(int64_t n_groups, int64_t n_blocks, const uint8_t* groups, const TileActivations& act, int64_t n_tokens, float* out,
               int64_t out_stride) {
  use_tile_shape(k_qk, k_tile_tokens);
  constexpr int64_t k_group_rows = k_in_place<Type> ? k_amx_tile_rows : k_interleave, k_unit_groups = k_unit_rows / k_group_rows;
  const int64_t group_bytes = n_blocks * int64_t(sizeof(GroupOf<Type>)), token_tile_bytes = n_blocks * k_a_tile_bytes;
  for (int64_t g = 0; g < n_groups; g += k_unit_groups) {
    const int64_t unit_groups = std::min(k_unit_groups, n_groups - g), n_rows = unit_groups * k_group_rows;
    const uint8_t* unit_groups_at = groups + g * group_bytes;
    Unit unit;
    if constexpr (k_in_place<Type>) unit = unit_in_place<GroupOf<Type>>(unit_groups, unit_groups_at, group_bytes);
    else unit = relaid_unit<Type>(unit_groups, n_blocks, unit_groups_at);
    float* unit_out = out + g * k_group_rows;
    for (int64_t t = 0; t < n_tokens;) {
      const int8_t* tiles = act.codes + t / k_tokens * token_tile_bytes;
      const float* scales = act.block_scales ? act.block_scales + t : nullptr;
      const int64_t scale_stride = act.scale_stride;
      if (t + 2 * k_tokens <= n_tokens) {
        unit_tiles<Type, 2>(n_blocks, unit, n_rows, tiles, scales, scale_stride, unit_out + t * out_stride, out_stride);
        t += 2 * k_tokens;
      } else {
        unit_tiles<Type, 1>(n_blocks, unit, n_rows, tiles, scales, scale_stride, unit_out + t * out_stride, out_stride);
        t += k_tokens;
      }
    }
  }
}

}  // namespace

InterleavedTilesFn interleaved_tiles_amx(DType type) {
  switch (type) {
    case DType::q8_0: return tiles_amx<DType::q8_0>;
    case DType::q4_0: return tiles_amx<DType::q4_0>;
    case DType::mxfp4: return tiles_amx<DType::mxfp4>;
    case DType::i8: return tiles_amx<DType::i8>;
    default: return nullptr;
  }
}

}  // namespace ds
