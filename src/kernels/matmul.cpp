#include "kernels/matmul.h"

#include <algorithm>

#include "kernels/vec_dot.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

// Rows per tile: a tile of weight rows stays in L1/L2 while it meets a tile of
// tokens, so prefill does not stream the activations once per row.
constexpr int64_t k_row_tile = 16;
constexpr int64_t k_token_tile = 32;

}  // namespace

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
            MatmulScratch& scratch) {
  const VecDotKernel kernel = vec_dot_kernel(w.type);
  const int64_t act_row_bytes = row_bytes(kernel.activation_type, w.n_cols);
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  if (kernel.activation_type != DType::f32) {
    const size_t needed = size_t(act_row_bytes * n_tokens);
    if (scratch.activations.size() < needed) scratch.activations.resize(needed);
    uint8_t* converted = scratch.activations.data();
    if (n_tokens == 1) {
      quantize_row(kernel.activation_type, x, converted, w.n_cols);
    } else {
      pool.parallel_for(n_tokens, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          quantize_row(kernel.activation_type, x + t * w.n_cols, converted + t * act_row_bytes, w.n_cols);
        }
      });
    }
    act = converted;
  }

  const int64_t w_row_bytes = w.row_stride_bytes();
  const int64_t n_row_tiles = (w.n_rows + k_row_tile - 1) / k_row_tile;
  auto rows = [&](int64_t tile_begin, int64_t tile_end) {
    const int64_t row_begin = tile_begin * k_row_tile;
    const int64_t row_end = std::min(w.n_rows, tile_end * k_row_tile);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += k_row_tile) {
      const int64_t r1 = std::min(row_end, r0 + k_row_tile);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += k_token_tile) {
        const int64_t t1 = std::min(n_tokens, t0 + k_token_tile);
        int64_t r = r0;
        if (kernel.dot2x4) {
          for (; r + 2 <= r1; r += 2) {
            const uint8_t* w_rows = w.data + r * w_row_bytes;
            int64_t t = t0;
            for (; t + 4 <= t1; t += 4) {
              float out[8];
              kernel.dot2x4(w.n_cols, w_rows, w_row_bytes, act + t * act_row_bytes, act_row_bytes, out);
              for (int j = 0; j < 4; ++j) {
                y[(t + j) * w.n_rows + r] = out[j];
                y[(t + j) * w.n_rows + r + 1] = out[4 + j];
              }
            }
            for (; t < t1; ++t) {
              y[t * w.n_rows + r] = kernel.dot(w.n_cols, w_rows, act + t * act_row_bytes);
              y[t * w.n_rows + r + 1] = kernel.dot(w.n_cols, w_rows + w_row_bytes, act + t * act_row_bytes);
            }
          }
        }
        for (; r < r1; ++r) {
          const uint8_t* w_row = w.data + r * w_row_bytes;
          int64_t t = t0;
          if (kernel.dot4) {
            for (; t + 4 <= t1; t += 4) {
              float out[4];
              kernel.dot4(w.n_cols, w_row, act + t * act_row_bytes, act_row_bytes, out);
              for (int j = 0; j < 4; ++j) y[(t + j) * w.n_rows + r] = out[j];
            }
          }
          for (; t < t1; ++t) y[t * w.n_rows + r] = kernel.dot(w.n_cols, w_row, act + t * act_row_bytes);
        }
      }
    }
  };
  // A few tokens: memory-bound, so each thread streams one contiguous half of
  // the weights (the prefetchers follow a single stream). More tokens:
  // compute-bound, so tiles go to whichever thread is free.
  if (n_tokens <= 2) {
    pool.parallel_for(n_row_tiles, rows);
  } else {
    pool.parallel_for_dynamic(n_row_tiles, 1, [&](int64_t begin, int64_t end, int) { rows(begin, end); });
  }
}

void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  const DType act_type = activation_type_for(w.type);
  std::vector<float> w_row(size_t(w.n_cols)), a_row(size_t(w.n_cols));
  std::vector<uint8_t> a_converted(size_t(row_bytes(act_type, w.n_cols)));
  for (int64_t t = 0; t < n_tokens; ++t) {
    quantize_row(act_type, x + t * w.n_cols, a_converted.data(), w.n_cols);
    dequantize_row(act_type, a_converted.data(), a_row.data(), w.n_cols);
    for (int64_t r = 0; r < w.n_rows; ++r) {
      dequantize_row(w.type, w.data + r * w.row_stride_bytes(), w_row.data(), w.n_cols);
      double sum = 0.0;
      for (int64_t k = 0; k < w.n_cols; ++k) sum += double(w_row[k]) * double(a_row[k]);
      y[t * w.n_rows + r] = float(sum);
    }
  }
}

}  // namespace ds
