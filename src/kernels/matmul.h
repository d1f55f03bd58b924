#pragma once
// y = x · Wᵀ for a weight matrix in any supported type: every token's row of
// activations against every weight row. All tokens of a step go through one
// call, so each weight row is read from memory once per step.

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/dtype.h"
#include "tensor/weight_matrix.h"

namespace ds {

// Reusable buffers for converted activations; owned by the caller so that the
// hot path does not allocate.
struct MatmulScratch {
  std::vector<uint8_t> activations;
  std::vector<int32_t> block_sums;  // Q4_0 and MXFP4 interleaved: sum(q) per activation block
  std::vector<float> block_scales;  // the AMX tiles: each activation block's scale as a float
  std::vector<int8_t> tile_codes;    // the AMX tiles: the codes, tile-ready
  std::vector<float> token_scales;     // I8: each activation row's scale
  std::vector<int32_t> token_sums;     // I8 with zero points: each activation row's sum of codes
};

// The largest row an I8 matmul sums exactly in int32: up to 128 * 127 per
// product (a file's weights may hold -128; activations stay within ±127).
constexpr int64_t k_max_i8_cols = INT32_MAX / (128 * 127);

// x: [n_tokens, w.n_cols] f32; y: [n_tokens, w.n_rows] f32.
void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
            MatmulScratch& scratch);

// n_mats matrices of one type, shape and layout (per-head slices), each
// against its own strided activations, in one dispatch: for m < n_mats and
// t < n_tokens, y[m * y_mat_stride + t * y_token_stride + r] = x row (m, t) ·
// w[m] row r, where x row (m, t) starts at x + m * x_mat_stride + t * x_token_stride.
void matmul_batched(ThreadPool& pool, const WeightMatrix* w, int64_t n_mats, const float* x, int64_t x_token_stride,
                    int64_t x_mat_stride, int64_t n_tokens, float* y, int64_t y_token_stride, int64_t y_mat_stride,
                    MatmulScratch& scratch);

// The plain reference: dequantize the weights (either layout) and the
// activations' converted form to f32 and accumulate in double.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);

}  // namespace ds
