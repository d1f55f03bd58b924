// BF16 weights on AMX-BF16 (interleaved_rows.h): each tdpbf16ps multiplies
// 16 tokens' 32 bf16 activations by 16 rows' 32 weights into 16 x 16 f32
// sums, 8,192 products an instruction, exact (a bf16 product fits an f32)
// and added in f32. The weights were laid out at load as the instruction's
// B operand (a tile row per pair of columns), so they are loaded as they
// lie, decode included; the sums stay in the tiles over the whole row and
// are stored once. Two tiles of tokens meet two groups of 16 rows per block
// of 32 columns. Compiled with AMX-TILE, AMX-BF16 and AVX-512; only called
// when use_amx_bf16_kernels().
//
// F16 weights stay on the AVX-512 tiles: a half is exactly the sum of two
// bf16 values, so an exact tile path exists (four products per pair), and it
// ran the 2048 x 2048 GEMM at 128 tokens in 2.29 ms against 5.46, but decode
// in 387 us against 335, the split costing more than the weights' reading;
// and a token's outputs must not depend on its step's size, so one path
// serves every step.

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/amx_tiles_x86.h"
#include "tensor/quant_blocks.h"

namespace ds {
namespace {

constexpr int64_t k_block_bytes = 2 * 32;                              // 32 bf16: a tile row of activations
constexpr int64_t k_group_block_bytes = k_amx_tile_rows * k_block_bytes;  // 16 rows x 32 columns: 1 KiB, a B tile

// RowTiles (1 or 2) groups at w (the second a group's bytes on) against
// TokenTiles (1 or 2) tiles of tokens at act; the outputs of the first
// n_valid tokens to out.
template <int RowTiles, int TokenTiles>
void bf16_tiles(int64_t n_blocks, const uint8_t* w, const uint8_t* act, int64_t act_stride, int64_t n_valid, float* out,
                int64_t out_stride) {
  zero_sums<TokenTiles>();
  const uint8_t* w1 = w + n_blocks * k_group_block_bytes;
  const uint8_t* act1 = act + k_tile_tokens * act_stride;
  for (int64_t b = 0; b < n_blocks; ++b) {
    DS_TILE_LOAD(DS_ACT0, act + b * k_block_bytes, act_stride);
    DS_TILE_LOAD(DS_W0, w + b * k_group_block_bytes, 64);
    _tile_dpbf16ps(DS_SUMS00, DS_ACT0, DS_W0);
    if (RowTiles == 2) {
      DS_TILE_LOAD(DS_W1, w1 + b * k_group_block_bytes, 64);
      _tile_dpbf16ps(DS_SUMS01, DS_ACT0, DS_W1);
    }
    if (TokenTiles == 2) {
      DS_TILE_LOAD(DS_ACT1, act1 + b * k_block_bytes, act_stride);
      _tile_dpbf16ps(DS_SUMS10, DS_ACT1, DS_W0);
      if (RowTiles == 2) _tile_dpbf16ps(DS_SUMS11, DS_ACT1, DS_W1);
    }
  }
  // Through a buffer: the tiles' rows past n_valid are padding, and their
  // columns past RowTiles groups another run's.
  alignas(64) int32_t sums[4][k_tile_sums];
  store_sums<TokenTiles>(sums);
  for (int64_t t = 0; t < n_valid; ++t) {
    for (int i = 0; i < RowTiles; ++i) {
      std::memcpy(out + t * out_stride + k_tile_tokens * i, sums[2 * (t / k_tile_tokens) + i] + k_tile_tokens * (t % k_tile_tokens),
                  k_tile_tokens * sizeof(float));
    }
  }
}

void tiles_bf16(int64_t n_cols, const uint8_t* groups, int64_t group_begin, int64_t group_end, const uint8_t* act, int64_t act_stride,
                int64_t n_tokens, float* out, int64_t out_stride) {
  // 64 bytes a tile row, as the K types' int8 tiles; a step of fewer than 16
  // tokens (decode) loads and multiplies only its own rows.
  use_tile_shape(64, int(std::min<int64_t>(n_tokens, k_tile_tokens)));
  const int64_t n_blocks = n_cols / k_qk, group_bytes = n_blocks * k_group_block_bytes;
  for (int64_t g = group_begin; g < group_end; g += 2) {
    const bool two_groups = g + 1 < group_end;
    for (int64_t t = 0; t < n_tokens; t += 2 * k_tile_tokens) {
      const int64_t valid = std::min<int64_t>(2 * k_tile_tokens, n_tokens - t);
      const uint8_t* w = groups + g * group_bytes;
      const uint8_t* a = act + t * act_stride;
      float* o = out + t * out_stride + g * k_amx_tile_rows;
      if (valid > k_tile_tokens) {
        if (two_groups) bf16_tiles<2, 2>(n_blocks, w, a, act_stride, valid, o, out_stride);
        else bf16_tiles<1, 2>(n_blocks, w, a, act_stride, valid, o, out_stride);
      } else {
        if (two_groups) bf16_tiles<2, 1>(n_blocks, w, a, act_stride, valid, o, out_stride);
        else bf16_tiles<1, 1>(n_blocks, w, a, act_stride, valid, o, out_stride);
      }
    }
  }
}

}  // namespace

Bf16TilesFn bf16_tiles_amx() { return tiles_bf16; }

}  // namespace ds
