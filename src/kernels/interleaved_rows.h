#pragma once
// Weight rows regrouped eight at a time, the layout the integer matmul
// kernels read (as llama.cpp's CPU "repack" buffers). One 32-byte register
// holds four consecutive elements of each of eight rows, so a token's four
// activations, broadcast, meet eight rows in one instruction; the result
// lanes are the eight outputs (no horizontal sums), and one loaded register
// serves a whole tile of tokens. A matrix takes the same bytes in either
// layout.
//
// One group block (8 rows x 32 elements; Q8_0 and I8 16 rows where AMX runs):
//   Q8_0: the G rows' f16 scales (G = 8, or 16 where AMX runs), then 32G
//         bytes; byte 4Gc + 4r + i is row r's element 4c + i. With G = 16,
//         chunk c (64 bytes) is row c of tdpbssd's B operand for the block,
//         so the AMX tiles load the weights as they lie (no copy per call).
//   Q4_0: the eight scales, then 128 bytes; byte 32v + 4r + i holds row r's
//         element 4v + i in its low nibble and element 16 + 4v + i in its
//         high one (the unsigned 0..15 codes, as in the file).
//   Q4_1: the eight scales d, the eight mins m, then the codes as Q4_0's.
//   Q5_0, Q5_1: as Q4_0 and Q4_1, with the rows' qh words (32 bytes) before
//         the codes; a row's word holds the fifth bit of its element 4v + i
//         (v, i < 4) at bit 8i + v and of element 16 + 4v + i at bit 8i + 4 + v,
//         so that chunk v's bits reach bit 4 of each byte by one shift.
//   MXFP4: the eight E8M0 scale bytes, then the codes laid out as Q4_0's.
//   Q4_K (8 rows x 256): the eight d, the eight dmin, the rows' 12 packed
//         scale bytes transposed (byte 8j + r is row r's byte j), then per pair p of sub-blocks 256 bytes where
//         byte 256p + 32c + 4r + i holds row r's element 64p + 4c + i in its
//         low nibble and element 64p + 32 + 4c + i in its high one.
//   Q5_K (8 rows x 256): as Q4_K, with the rows' qh before the quants:
//         byte 32c + 4r + i is row r's qh byte 4c + i (bit 2p: the fifth bit
//         of the low nibble of quant byte 256p + 32c + 4r + i, bit 2p + 1: of its high nibble).
//   Q6_K (8 rows x 256, re-packed rather than moved): the eight d; the
//         scales, byte 8s + r = row r's scale of sub-block s; then, in
//         4-element chunks c (elements 4c..4c+3) of the unsigned 6-bit codes,
//         32 low-nibble registers, byte 4r + k of register i holding the low
//         nibbles of row r's element 4i + k (low) and 128 + 4i + k (high),
//         and 16 high-bit registers, byte 4r + k of register i holding the
//         top two bits of row r's element 4(i + 16q) + k at bits 2q, 2q + 1
//         (q < 4); stored in the order the kernel reads them, eight steps of
//         six registers: high 2s, high 2s + 1, low 2s, low 2s + 1, low 16 + 2s,
//         low 17 + 2s (one sequential stream: three streams 512 bytes apart
//         decoded at a third of the bandwidth, measured).
//   BF16 (16 rows x 32, only where AMX-BF16 runs: the B operand of
//         tdpbf16ps as it is): byte 64p + 4r + 2i is row r's element 2p + i,
//         a tile row per pair of columns.
//   I8 (W8A8, G rows x 32 as Q8_0's, no scales in the matrix): 32G bytes,
//         byte 4Gc + 4r + i is row r's element 4c + i, as Q8_0's quants. The kernel
//         writes each output's exact int32 sum (as a float); the row and token
//         scales multiply afterwards (matmul.cpp), as for the row layout.

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

constexpr int64_t k_interleave = 8;
constexpr int64_t k_amx_tile_rows = 16;  // the rows of a BF16 group, and of Q8_0's and I8's where AMX runs: one tile's

// Rows of a group block: 8, or 16 (BF16; Q8_0 and I8 where use_amx_kernels()).
int64_t interleaved_group_rows(DType type);

// Elements of a row in one group block: the type's block, or 32 for I8.
int64_t interleaved_block_elements(DType type);

// Whether matrices of this type and shape are interleaved at load: a type
// with interleaved kernels on this CPU, whole groups of rows and (I8) whole
// group blocks of columns.
bool interleavable(DType type, int64_t n_rows, int64_t n_cols);

// rows: n_rows rows in the GGUF layout; out: the same bytes interleaved.
void interleave_rows(DType type, int64_t n_rows, int64_t n_cols, const uint8_t* rows, uint8_t* out);

// Row `row` of an interleaved matrix, written in the GGUF row layout.
void deinterleaved_row(DType type, int64_t n_cols, const uint8_t* data, int64_t row, uint8_t* out);

// One group (interleaved_group_rows rows) against n_tokens tokens: for j <
// n_tokens, out + j * out_stride receives the group's outputs of token j,
// whose activations (Q8_0; Q8_1 for Q4_1 and Q5_1, Q8_K for the K types, an
// int8 row for I8) are at act + j * act_stride; n_blocks counts group
// blocks. Q4_0, Q5_0 and MXFP4 read each activation block's code sum sum(q)
// at block_sums[j * n_blocks + b] (their weight codes are offset to unsigned
// bytes; the sum takes the offset back out); the others ignore it. Tokens go
// through in register tiles; every token's outputs are the same whatever
// n_tokens is.
using InterleavedGroupFn = void (*)(int64_t n_blocks, const uint8_t* group, const uint8_t* act, int64_t act_stride,
                                    const int32_t* block_sums, int64_t n_tokens, float* out, int64_t out_stride);

// Two consecutive groups (16 rows, the second group_bytes after the first)
// against n_tokens tokens, as InterleavedGroupFn twice, the outputs of both
// side by side (out + j * out_stride: the first group's rows, then the
// second's) and equal to the group kernel's bit for bit. Token j's
// activations are at act.rows + j * act.row_stride, as the group kernel
// reads them; Q4_0, Q5_0 and MXFP4 read act.block_sums as it does, and the
// types with Q8_0 activations block b's activation scale as a float at
// act.block_scales[b * act.scale_stride + j].
struct PairActivations {
  const uint8_t* rows;
  int64_t row_stride;
  const int32_t* block_sums;
  const float* block_scales;
  int64_t scale_stride;
};
using InterleavedPairFn = void (*)(int64_t n_blocks, const uint8_t* groups, int64_t group_bytes, const PairActivations& act,
                                   int64_t n_tokens, float* out, int64_t out_stride);

// The pair kernel for a type in 8-row groups where the CPU has AVX-512F, BW
// and VNNI (and the VNNI kernels run), else nullptr: 512-bit registers, for
// steps of k_pair_min_tokens tokens or more (at fewer the weights' reads
// bound the step, and the group kernels fetch them ahead). It reads the
// activations as interleaved_kernel(type) does: the biased codes where
// interleaved_activations_biased(type).
InterleavedPairFn interleaved_pair_kernel(DType type);
constexpr int64_t k_pair_min_tokens = 4;
// For the tests, whatever the CPU: every type with interleaved kernels (Q8_0 in 8-row groups).
InterleavedPairFn interleaved_pair_kernel_avx512(DType type);
InterleavedPairFn interleaved_pair_kernel_avx512_k(DType type);  // the K types'

// Whether interleaved_kernel(type) reads block_sums.
inline bool interleaved_kernel_reads_block_sums(DType type) {
  return type == DType::q4_0 || type == DType::q5_0 || type == DType::mxfp4;
}

// The kernel for a type on this CPU: the VNNI one where use_vnni_kernels(),
// else the AVX2 one; nullptr if the CPU has none.
InterleavedGroupFn interleaved_kernel(DType type);

// Whether interleaved_kernel(type) reads biased activation codes: each int8
// code a (Q8_0 blocks' quants, I8 rows; all within ±127) as the unsigned byte
// a + 128, which VNNI's dpbusd meets with the signed weights in one
// instruction (the kernel takes 128 x the weights' sum back out).
bool interleaved_activations_biased(DType type);

// Biases the codes of n_cols activations of act_type (Q8_0 or I8) in place.
void bias_activation_codes(DType act_type, uint8_t* row, int64_t n_cols);

// Per ISA, for the tests; nullptr for a type the ISA has no kernel of.
InterleavedGroupFn interleaved_kernel_avx2(DType type);
InterleavedGroupFn interleaved_kernel_vnni(DType type);
bool interleaved_kernel_vnni_biased(DType type);  // the AVX2 kernels read plain codes

// AMX tiles (tdpbssd): n_groups consecutive groups (interleaved_group_rows
// rows each) at `groups` against n_tokens tokens, a multiple of k_amx_tile_tokens. Token
// j's outputs go to out + j * out_stride, and equal the interleaved
// kernel's (VNNI's, or AVX2's for the K types) bit for bit: every block's
// (sub-block's) sum is exact and its float part is that kernel's, operation
// for operation (I8: the exact row sum, as a float). nullptr for a type
// without AMX tiles.
struct TileActivations {
  const int8_t* codes;  // plain (not biased) codes, tile-ready: pack_tile_activations
  // Q8_0 blocks (Q8_0, Q4_0, MXFP4 weights): block b's scale of token j as a
  // float at block_scales[b * scale_stride + j]; null for the others.
  const float* block_scales;
  int64_t scale_stride;
  // Q8_K rows (the K types): their scales and sub-block sums, token j's at
  // rows + j * row_stride; null for the others.
  const uint8_t* rows;
  int64_t row_stride;
};
using InterleavedTilesFn = void (*)(int64_t n_groups, int64_t n_blocks, const uint8_t* groups, const TileActivations& act,
                                    int64_t n_tokens, float* out, int64_t out_stride);
constexpr int64_t k_amx_tile_tokens = 16;
// The tiles multiply 32 rows at a time (two tiles of 16 rows; the 8-row
// groups re-laid together): matmul hands them runs of this many rows.
constexpr int64_t k_amx_run_rows = 32;
InterleavedTilesFn interleaved_tiles_amx(DType type);
InterleavedTilesFn interleaved_tiles_amx_k(DType type);  // Q4_K, Q5_K, Q6_K
// The AMX tiles for a type where use_amx_kernels(), else nullptr.
InterleavedTilesFn interleaved_tiles(DType type);

// BF16 weights on AMX-BF16 (tdpbf16ps; use_amx_bf16_kernels()): row groups
// [group_begin, group_end) (16 rows each) of a BF16 matrix in its
// interleaved layout against n_tokens tokens, whose bf16 rows are at act + j
// * act_stride, zero rows after them up to a multiple of 16 (the tiles read
// whole tiles of tokens; with fewer than 16 tokens, tiles of that many rows,
// no padding); token j's outputs go to out + j * out_stride. Each output is
// its products summed in f32 in the tile, 32 columns at a time in column
// order: the same operations whatever the other tokens, so one token alone
// and in a step of any size gives the same bits. Every step of a matrix so
// repacked goes through here, decode included.
using Bf16TilesFn = void (*)(int64_t n_cols, const uint8_t* groups, int64_t group_begin, int64_t group_end, const uint8_t* act,
                             int64_t act_stride, int64_t n_tokens, float* out, int64_t out_stride);
Bf16TilesFn bf16_tiles_amx();

// The fewest tokens a step sends through the AMX tiles: a tile (16), or for
// the K types two, since their re-laid weights (codes times scale digits)
// cost about one tile of tokens' products: at 16 tokens a 2048 x 2048 Q4_K
// or Q6_K matrix was 7-15% slower than on the AVX2 tiles, at 32 1.1-1.4x
// faster (`dsinfer_backend_ops perf --op matmul`, n=16 and n=32).
int64_t amx_min_tokens(DType weight_type);

// Codes per product of a type's tiles (its activation tiles' row): a block
// of 32, or 64 for the K types (interleaved_rows_k_amx.cpp).
int64_t amx_tile_depth(DType weight_type);

// The codes of n_tokens tokens (a multiple of 16; act_type Q8_0 blocks, Q8_K
// blocks or I8 rows at act + j * act_stride) as the AMX tiles read them, in
// products of `depth` codes: tile T's product p (codes p * depth onwards), 16
// tokens x depth codes, at out + (T * n_cols / depth + p) * 16 * depth; one
// sequential stream, where 16 rows of a product lie a row apart.
void pack_tile_activations(DType act_type, int64_t depth, const uint8_t* act, int64_t act_stride, int64_t n_tokens,
                           int64_t n_cols, int8_t* out);

// The calling thread's scratch of at least `bytes`, kept for its next call:
// the AMX tiles' re-laid weights. Here, in the baseline ISA's object, so that
// no library template is instantiated in theirs.
uint8_t* interleaved_scratch(size_t bytes);

}  // namespace ds
