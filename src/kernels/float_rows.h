#pragma once
// F32, F16 and BF16 weight rows against activation rows of the same type (as
// llama.cpp pairs them), in register tiles of up to two rows by three tokens
// (AVX2) or four rows by six (AVX-512) with two accumulators per (row, token),
// for the even and the odd steps of columns (AVX-512: the two halves of one
// register). A (row, token)'s order is fixed (below), so its sum cannot be
// split into more chains: decode keeps the FMA units busy with the tile's
// rows instead, each (row, token) a chain of its own, where one row alone
// waits on the FMA latency and reads well under the memory bandwidth. A step
// is eight columns of F32 or F16, or sixteen of BF16 as eight pairs, each
// lane adding its odd column's product and then its even one's
// (AVX512_BF16's vdpbf16ps order).
//
// F16 activations come as f16: f32 copies rounded to f16 (the same products)
// ran the 2048 x 2048 GEMM at 128 tokens 5% faster but the 1.1B model's pp512
// 11% slower (93 -> 83 tok/s on a Sapphire Rapids-class Xeon): twice the
// bytes of token rows streamed from L2. The AVX-512 prefill converts a tile
// of tokens to f32 a part of the columns at a time instead, in L1, once for
// all the rows of the call (float_rows_avx512.cpp): hand it runs of rows.
//
// Batch invariance: every tile adds a (row, token) pair's products in the same
// order (the two accumulators over the columns, added, their lanes summed by
// hsum, then the columns past the last whole step one by one).

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

// Rows [row_begin, row_end) of a row-major weight matrix (w, w_row_bytes apart,
// n_cols each) against the activation rows x + t * x_row_bytes, t < n_tokens:
// y[t * y_stride + r] = row r . token t.
using FloatRowsFn = void (*)(const uint8_t* w, int64_t w_row_bytes, int64_t n_cols, int64_t row_begin, int64_t row_end,
                             const uint8_t* x, int64_t x_row_bytes, int64_t n_tokens, float* y, int64_t y_stride);

// The AVX2 kernel for F32, F16 or BF16 weights; nullptr for other types.
FloatRowsFn float_rows_avx2(DType weight_type);

// The AVX-512 kernel (four rows by six tokens, BF16 by four; the same order
// as the AVX2 kernel): F32, F16 and BF16 (two FMAs a pair) with the AVX2
// kernel's bits; nullptr for other types.
FloatRowsFn float_rows_avx512(DType weight_type);
// BF16 with vdpbf16ps (AVX512_BF16; denormals flushed), where
// use_bf16_dot_kernels(): the same order on normal numbers.
FloatRowsFn float_rows_avx512_bf16_dot();

}  // namespace ds
