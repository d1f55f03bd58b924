#pragma once
// Weight rows regrouped eight at a time, the layout the integer matmul
// kernels read (as llama.cpp's CPU "repack" buffers). One 32-byte register
// holds four consecutive elements of each of eight rows, so a token's four
// activations, broadcast, meet eight rows in one instruction; the result
// lanes are the eight outputs (no horizontal sums), and one loaded register
// serves a whole tile of tokens. A matrix takes the same bytes in either
// layout.
//
// One group block (8 rows x 32 elements):
//   Q8_0: the eight rows' f16 scales, then 256 bytes; byte 32c + 4r + i is
//         row r's element 4c + i.
//   Q4_0: the eight scales, then 128 bytes; byte 32v + 4r + i holds row r's
//         element 4v + i in its low nibble and element 16 + 4v + i in its
//         high one (the unsigned 0..15 codes, as in the file).

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

constexpr int64_t k_interleave = 8;

// Whether matrices of this type and row count are interleaved at load: a
// type with interleaved kernels on this CPU, and whole groups of rows.
bool interleavable(DType type, int64_t n_rows);

// rows: n_rows rows in the GGUF layout; out: the same bytes interleaved.
void interleave_rows(DType type, int64_t n_rows, int64_t n_cols, const uint8_t* rows, uint8_t* out);

// Row `row` of an interleaved matrix, written in the GGUF row layout.
void deinterleaved_row(DType type, int64_t n_cols, const uint8_t* data, int64_t row, uint8_t* out);

// A tile of one group (8 rows) against n_tokens tokens: for j < n_tokens,
// out + j * out_stride receives the 8 outputs of token j, whose Q8_0
// activations are at act + j * act_stride. Q4_0 needs each activation
// block's offset 8 * sum(q) at offsets[j * n_blocks + b]; Q8_0 ignores it.
using InterleavedTileFn = void (*)(int64_t n_blocks, const uint8_t* group, const uint8_t* act, int64_t act_stride,
                                   const int32_t* offsets, float* out, int64_t out_stride);

constexpr int k_interleaved_token_tile = 4;

// The tile kernel for 1..k_interleaved_token_tile tokens; nullptr if the CPU
// has none for the type.
InterleavedTileFn interleaved_tile_avx2(DType type, int n_tokens);

}  // namespace ds
