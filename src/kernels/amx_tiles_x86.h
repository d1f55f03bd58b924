#pragma once
// What the AMX tile kernels share (interleaved_rows_amx.cpp for the 32-code
// block types, interleaved_rows_k_amx.cpp for the K types): the tile
// registers, their configuration, and the step from a tile of int32 sums to
// vector registers. Included only by files compiled with AMX-TILE, AMX-INT8
// and AVX-512.
//
// Every kernel uses the same eight registers: four 16 x 16 tiles of int32
// sums (two tiles of 16 tokens against two tiles of 16 weight rows), two of
// activation codes (16 tokens x `depth` codes) and two of weight codes (16
// rows x `depth` codes, four codes of each row per tile row). The depth (32
// codes for the block types, 64 for the K types) is the only difference, so
// a thread keeps one configuration loaded and reloads it only when the depth
// changes.

#include <immintrin.h>

#include <cstdint>

#include "kernels/interleaved_rows.h"

namespace ds {

// Tile registers (macros: the intrinsics paste the number into the
// instruction). Sums (token tile j, row tile i) in register 2j + i.
#define DS_SUMS00 0
#define DS_SUMS01 1
#define DS_SUMS10 2
#define DS_SUMS11 3
#define DS_ACT0 4  // 16 tokens x depth codes
#define DS_ACT1 5
#define DS_W0 6  // depth / 4 tile rows x 64 bytes: 16 weight rows
#define DS_W1 7

constexpr int k_tile_tokens = int(k_amx_tile_tokens);  // a tile's tokens, and its weight rows
constexpr int k_tile_sums = k_tile_tokens * k_tile_tokens;

// The palette-1 configuration of the eight registers for `depth` codes per
// product (ldtilecfg's 64-byte operand).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Loads the configuration for `depth` codes (32 or 64) and token_rows
// tokens (16; fewer at depth 64 only) into the calling thread's tile
// registers unless it is loaded already (defined in interleaved_rows_amx.cpp:
// one record of what each thread has loaded).
void use_tile_shape(int depth, int token_rows);

// The four sums tiles into `sums` (token tile j, row tile i at sums[2j + i], token-major).
// GCC's _tile_stored, like _tile_loadd, declares no memory access: the
// compiler barrier after the stores keeps the reads of `sums` after them.
template <int TokenTiles>
inline void store_sums(int32_t (*sums)[k_tile_sums]) {
  _tile_stored(DS_SUMS00, sums[0], 64);
  _tile_stored(DS_SUMS01, sums[1], 64);
  if (TokenTiles == 2) {
    _tile_stored(DS_SUMS10, sums[2], 64);
    _tile_stored(DS_SUMS11, sums[3], 64);
  }
  __asm__ volatile("" ::: "memory");
}

template <int TokenTiles>
inline void zero_sums() {
  _tile_zero(DS_SUMS00);
  _tile_zero(DS_SUMS01);
  if (TokenTiles == 2) {
    _tile_zero(DS_SUMS10);
    _tile_zero(DS_SUMS11);
  }
}

// A tile load. GCC's _tile_loadd tells the compiler nothing of the memory
// it reads, so stores before it could be moved past it, or dropped as dead
// where only the tile reads them (a local buffer's: seen); a compiler
// barrier first keeps them. Its cost: none at run time.
#define DS_TILE_LOAD(tile, base, stride)  \
  do {                                    \
    __asm__ volatile("" ::: "memory");    \
    _tile_loadd(tile, base, stride);      \
  } while (0)

// One product into sums register `dst`: the weights' bytes signed
// (tdpbssd) or unsigned (tdpbsud). A macro: the tile numbers must reach the
// intrinsics as literals.
#define DS_TILE_PRODUCT(unsigned_weights, dst, act, w) \
  do {                                                 \
    if constexpr (unsigned_weights) {                  \
      _tile_dpbsud(dst, act, w);                       \
    } else {                                           \
      _tile_dpbssd(dst, act, w);                       \
    }                                                  \
  } while (0)

// The products of one depth of codes: each token tile (at act, and act +
// act_tile_stride for the second) against both weight tiles (w, w + w_tile_bytes).
template <int TokenTiles, bool UnsignedWeights = false>
inline void multiply_tiles(const int8_t* act, int64_t act_tile_stride, int depth, const int8_t* w, int64_t w_tile_bytes) {
  DS_TILE_LOAD(DS_ACT0, act, depth);
  DS_TILE_LOAD(DS_W0, w, 64);
  DS_TILE_LOAD(DS_W1, w + w_tile_bytes, 64);
  DS_TILE_PRODUCT(UnsignedWeights, DS_SUMS00, DS_ACT0, DS_W0);
  DS_TILE_PRODUCT(UnsignedWeights, DS_SUMS01, DS_ACT0, DS_W1);
  if (TokenTiles == 2) {
    DS_TILE_LOAD(DS_ACT1, act + act_tile_stride, depth);
    DS_TILE_PRODUCT(UnsignedWeights, DS_SUMS10, DS_ACT1, DS_W0);
    DS_TILE_PRODUCT(UnsignedWeights, DS_SUMS11, DS_ACT1, DS_W1);
  }
}

}  // namespace ds
