#include "kernels/matmul.h"

#include <algorithm>

#include "kernels/activation_quant.h"
#include "kernels/interleaved_rows.h"
#include "kernels/vec_dot.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

// Rows per tile: a tile of weight rows stays in L1/L2 while it meets a tile of
// tokens, so prefill does not stream the activations once per row.
constexpr int64_t k_row_tile = 16;
constexpr int64_t k_token_tile = 32;

// Activations in the kernel's type, converted once for all rows; with the
// per-block offsets the interleaved Q4_0 kernel needs.
const uint8_t* convert_activations(ThreadPool& pool, DType act_type, const float* x, int64_t n_tokens, int64_t n_cols,
                                   bool with_offsets, MatmulScratch& scratch) {
  if (act_type == DType::f32) return reinterpret_cast<const uint8_t*>(x);
  const int64_t act_row_bytes = row_bytes(act_type, n_cols), n_blocks = n_cols / k_qk;
  const size_t needed = size_t(act_row_bytes * n_tokens);
  if (scratch.activations.size() < needed) scratch.activations.resize(needed);
  if (with_offsets && scratch.block_offsets.size() < size_t(n_tokens * n_blocks)) {
    scratch.block_offsets.resize(size_t(n_tokens * n_blocks));
  }
  uint8_t* converted = scratch.activations.data();
  auto convert = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      quantize_activations(act_type, x + t * n_cols, converted + t * act_row_bytes, n_cols);
      if (!with_offsets) continue;
      const auto* blocks = reinterpret_cast<const BlockQ8_0*>(converted + t * act_row_bytes);
      for (int64_t b = 0; b < n_blocks; ++b) {
        int32_t sum = 0;
        for (int8_t q : blocks[b].qs) sum += q;
        scratch.block_offsets[size_t(t * n_blocks + b)] = 8 * sum;
      }
    }
  };
  if (n_tokens == 1) convert(0, 1);
  else pool.parallel_for(n_tokens, convert);
  return converted;
}

// A few tokens: memory-bound, so each thread streams one contiguous part of
// the weights (the prefetchers follow a single stream; measured ~10% more
// bandwidth than handing out tiles, up to six tokens). More tokens:
// compute-bound, so runs of tiles go to whichever thread is free (runs, so
// that the group a kernel prefetches is usually its own thread's next).
constexpr int64_t k_max_streaming_tokens = 6;
constexpr int64_t k_tiles_per_run = 4;

void for_row_tiles(ThreadPool& pool, int64_t n_tiles, int64_t n_tokens, FunctionRef<void(int64_t, int64_t)> tiles) {
  if (n_tokens <= k_max_streaming_tokens) {
    pool.parallel_for(n_tiles, tiles);
  } else {
    pool.parallel_for_dynamic(n_tiles, k_tiles_per_run, [&](int64_t begin, int64_t end, int) { tiles(begin, end); });
  }
}

void matmul_rows(ThreadPool& pool, const WeightMatrix& w, const VecDotKernel& kernel, const uint8_t* act,
                 int64_t n_tokens, float* y) {
  const int64_t act_row_bytes = row_bytes(kernel.activation_type, w.n_cols);
  const int64_t w_row_bytes = w.row_stride_bytes();
  const int64_t n_row_tiles = (w.n_rows + k_row_tile - 1) / k_row_tile;
  for_row_tiles(pool, n_row_tiles, n_tokens, [&](int64_t tile_begin, int64_t tile_end) {
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
  });
}

// Each group of eight rows against every token: the group's weights stay in
// L1/L2 while the tokens pass.
void matmul_interleaved(ThreadPool& pool, const WeightMatrix& w, const uint8_t* act, const int32_t* offsets,
                        int64_t n_tokens, float* y) {
  const int64_t act_row_bytes = row_bytes(activation_type_for(w.type), w.n_cols);
  const int64_t n_blocks = w.n_cols / dtype_traits(w.type).block_elements;
  const int64_t group_bytes = k_interleave * w.row_stride_bytes();
  const InterleavedGroupFn kernel = interleaved_kernel_avx2(w.type);
  for_row_tiles(pool, w.n_rows / k_interleave, n_tokens, [&](int64_t group_begin, int64_t group_end) {
    for (int64_t g = group_begin; g < group_end; ++g) {
      kernel(n_blocks, w.data + g * group_bytes, act, act_row_bytes, offsets, n_tokens, y + g * k_interleave, w.n_rows);
    }
  });
}

}  // namespace

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
            MatmulScratch& scratch) {
  const VecDotKernel kernel = vec_dot_kernel(w.type);
  const bool needs_offsets = w.interleaved && w.type == DType::q4_0;
  const uint8_t* act = convert_activations(pool, kernel.activation_type, x, n_tokens, w.n_cols, needs_offsets, scratch);
  if (w.interleaved) {
    matmul_interleaved(pool, w, act, needs_offsets ? scratch.block_offsets.data() : nullptr, n_tokens, y);
  } else {
    matmul_rows(pool, w, kernel, act, n_tokens, y);
  }
}

void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  const DType act_type = activation_type_for(w.type);
  std::vector<float> w_row(size_t(w.n_cols)), a_row(size_t(w.n_cols));
  std::vector<uint8_t> a_converted(size_t(row_bytes(act_type, w.n_cols)));
  std::vector<uint8_t> row_bytes_buffer(size_t(w.row_stride_bytes()));
  for (int64_t t = 0; t < n_tokens; ++t) {
    quantize_row(act_type, x + t * w.n_cols, a_converted.data(), w.n_cols);
    dequantize_row(act_type, a_converted.data(), a_row.data(), w.n_cols);
    for (int64_t r = 0; r < w.n_rows; ++r) {
      const uint8_t* row = w.data + r * w.row_stride_bytes();
      if (w.interleaved) {
        deinterleaved_row(w.type, w.n_cols, w.data, r, row_bytes_buffer.data());
        row = row_bytes_buffer.data();
      }
      dequantize_row(w.type, row, w_row.data(), w.n_cols);
      double sum = 0.0;
      for (int64_t k = 0; k < w.n_cols; ++k) sum += double(w_row[k]) * double(a_row[k]);
      y[t * w.n_rows + r] = float(sum);
    }
  }
}

}  // namespace ds
