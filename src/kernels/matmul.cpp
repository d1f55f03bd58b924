#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/fp16.h"
#include "base/status.h"
#include "kernels/activation_quant.h"
#include "kernels/cpu_features.h"
#include "kernels/float_rows.h"
#include "kernels/interleaved_rows.h"
#include "kernels/vec_dot.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

// A W8A8 output from its int32 sum (as float, exact below 2^24), the same
// float operations in the kernels and the reference.
inline float w8a8_output(float sum, int32_t zero_point, int32_t token_sum, float token_scale, float row_scale) {
  if (zero_point != 0) sum -= float(int64_t(zero_point) * token_sum);
  return sum * token_scale * row_scale;
}

// Rows per tile: a tile of weight rows stays in L1/L2 while it meets a tile of
// tokens, so prefill does not stream the activations once per row.
constexpr int64_t k_row_tile = 16;
constexpr int64_t k_token_tile = 32;

// The activations of every matrix in the kernel's type, converted once for
// all rows: matrix m's token t at act + m * mat_stride + t * token_stride
// (bytes), with the per-block code sums the interleaved Q4_0 and MXFP4
// kernels need and the block scales as floats the AMX tiles read
// (interleaved_rows.h); the codes of tokens from first_biased_token on are
// biased (the interleaved kernel reads them so; the AMX tiles read the ones
// before it plain).
struct Activations {
  const uint8_t* data;
  int64_t token_stride, mat_stride;
  const int32_t* block_sums;  // [n_mats][n_tokens][n_blocks], or null
  const float* block_scales;  // Q8_0 blocks' scales as floats for the AMX tiles and pair kernels: [n_mats][n_blocks][n_tokens], or null
  const float* token_scales;  // I8: [n_mats][n_tokens], or null
  const int32_t* token_sums;  // I8 with zero points: [n_mats][n_tokens], or null
};

// Token rows a multiple of 4 KiB apart fall in the same L1 sets, where a
// tile's six token rows and four weight rows overflow the eight ways; a cache
// line more between them spreads them over other sets (measured: the F16 GEMM
// at 2048 columns and 128 tokens 7-12% faster).
int64_t activation_row_stride(int64_t row_bytes) { return row_bytes % 4096 == 0 ? row_bytes + 64 : row_bytes; }

Activations convert_activations(ThreadPool& pool, DType act_type, const float* x, int64_t x_token_stride, int64_t x_mat_stride,
                                int64_t n_mats, int64_t n_tokens, int64_t n_cols, bool with_block_sums, bool with_block_scales,
                                float static_scale, bool with_sums, int64_t first_biased_token, MatmulScratch& scratch) {
  if (act_type == DType::f32) {
    const int64_t f = int64_t(sizeof(float));
    return {reinterpret_cast<const uint8_t*>(x), x_token_stride * f, x_mat_stride * f, nullptr, nullptr, nullptr, nullptr};
  }
  const int64_t act_row_stride = activation_row_stride(row_bytes(act_type, n_cols)), n_blocks = n_cols / k_qk, n_rows = n_mats * n_tokens;
  const size_t needed = size_t(act_row_stride * n_rows);
  if (scratch.activations.size() < needed) scratch.activations.resize(needed);
  if (with_block_sums && scratch.block_sums.size() < size_t(n_rows * n_blocks)) scratch.block_sums.resize(size_t(n_rows * n_blocks));
  if (with_block_scales && scratch.block_scales.size() < size_t(n_rows * n_blocks)) scratch.block_scales.resize(size_t(n_rows * n_blocks));
  const bool per_token_int8 = act_type == DType::i8;
  if (per_token_int8 && scratch.token_scales.size() < size_t(n_rows)) scratch.token_scales.resize(size_t(n_rows));
  if (with_sums && scratch.token_sums.size() < size_t(n_rows)) scratch.token_sums.resize(size_t(n_rows));
  uint8_t* converted = scratch.activations.data();
  auto convert = [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t m = row / n_tokens, t = row % n_tokens;
      const float* in = x + m * x_mat_stride + t * x_token_stride;
      if (per_token_int8) {
        auto* codes = reinterpret_cast<int8_t*>(converted + row * act_row_stride);
        scratch.token_scales[size_t(row)] = quantize_int8_activations(in, codes, n_cols, static_scale);
        if (with_sums) scratch.token_sums[size_t(row)] = std::accumulate(codes, codes + n_cols, int32_t(0));
        if (t >= first_biased_token) bias_activation_codes(act_type, converted + row * act_row_stride, n_cols);
        continue;
      }
      quantize_activations(act_type, in, converted + row * act_row_stride, n_cols);
      if (t >= first_biased_token) bias_activation_codes(act_type, converted + row * act_row_stride, n_cols);
      const auto* blocks = reinterpret_cast<const BlockQ8_0*>(converted + row * act_row_stride);
      for (int64_t b = 0; with_block_scales && b < n_blocks; ++b) {
        scratch.block_scales[size_t((m * n_blocks + b) * n_tokens + t)] = fp16_to_fp32(blocks[b].d);
      }
      if (!with_block_sums) continue;
      for (int64_t b = 0; b < n_blocks; ++b) {
        int32_t sum = 0;
        for (int8_t q : blocks[b].qs) sum += q;
        scratch.block_sums[size_t(row * n_blocks + b)] = sum;
      }
    }
  };
  if (n_rows == 1) convert(0, 1);
  else pool.parallel_for(n_rows, convert);
  return {converted,
          act_row_stride,
          act_row_stride * n_tokens,
          with_block_sums ? scratch.block_sums.data() : nullptr,
          with_block_scales ? scratch.block_scales.data() : nullptr,
          per_token_int8 ? scratch.token_scales.data() : nullptr, with_sums ? scratch.token_sums.data() : nullptr};
}

// The AMX tiles' codes of every matrix's first n_tiled tokens (pack_tile_activations, in products of
// `depth` codes): matrix m's at m * n_tiled * n_cols.
const int8_t* pack_tile_codes(ThreadPool& pool, DType act_type, int64_t depth, const Activations& act, int64_t n_mats,
                              int64_t n_tiled, int64_t n_cols, MatmulScratch& scratch) {
  if (scratch.tile_codes.size() < size_t(n_mats * n_tiled * n_cols)) scratch.tile_codes.resize(size_t(n_mats * n_tiled * n_cols));
  const int64_t tiles = n_tiled / k_amx_tile_tokens;
  pool.parallel_for(n_mats * tiles, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t m = i / tiles, t0 = i % tiles * k_amx_tile_tokens;
      pack_tile_activations(act_type, depth, act.data + m * act.mat_stride + t0 * act.token_stride, act.token_stride,
                            k_amx_tile_tokens, n_cols, scratch.tile_codes.data() + m * n_tiled * n_cols + t0 * n_cols);
    }
  });
  return scratch.tile_codes.data();
}

// A few tokens: memory-bound, so each thread streams one contiguous part of
// the weights (the prefetchers follow a single stream; measured ~10% more
// bandwidth than handing out tiles, up to six tokens). More tokens:
// compute-bound, so runs of tiles go to whichever thread is free (runs, so
// that the group a kernel prefetches is usually its own thread's next).
constexpr int64_t k_max_streaming_tokens = 6;
constexpr int64_t k_tiles_per_run = 4;

// Float weights' tiles: AVX-512's where the CPU has them (BF16's on
// vdpbf16ps where use_bf16_dot_kernels()), for decode as well as prefill (the
// zmm tile's half as many instructions decoded F16 faster in nine of eleven
// alternating rounds); AVX2's otherwise. One kernel for every batch, since
// vdpbf16ps flushes the denormals that the FMA tiles keep.
FloatRowsFn float_rows_kernel(DType weight_type) {
  if (!use_avx2_kernels()) return nullptr;
  if (weight_type == DType::bf16 && use_bf16_dot_kernels()) return float_rows_avx512_bf16_dot();
  return use_vnni_kernels() ? float_rows_avx512(weight_type) : float_rows_avx2(weight_type);
}

void for_row_tiles(ThreadPool& pool, int64_t n_tiles, int64_t n_tokens, FunctionRef<void(int64_t, int64_t)> tiles) {
  if (n_tokens <= k_max_streaming_tokens) {
    pool.parallel_for(n_tiles, tiles);
  } else {
    pool.parallel_for_dynamic(n_tiles, k_tiles_per_run, [&](int64_t begin, int64_t end, int) { tiles(begin, end); });
  }
}

// W8A8: outputs y[t * y_stride + r] for tokens [t0, t1) and rows [r0, r1)
// hold their int32 sums (as floats); each becomes the sum less the row's zero
// point times the token's code sum, times the token's scale, times the row's.
void scale_w8a8_outputs(const WeightMatrix& w, const float* token_scales, const int32_t* token_sums, int64_t t0, int64_t t1,
                        int64_t r0, int64_t r1, float* y, int64_t y_stride) {
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t r = r0; r < r1; ++r) {
      float& out = y[t * y_stride + r];
      out = w8a8_output(out, w.row_zero_points ? w.row_zero_points[r] : 0, token_sums ? token_sums[t] : 0, token_scales[t],
                        w.row_scales[r]);
    }
  }
}

// Rows [row_begin, row_end) of one matrix in the row layout against every
// token: act + t * act_stride (bytes) in, y + t * y_stride + r out (for I8,
// scaled by scale_w8a8_outputs).
void rows_against_tokens(const WeightMatrix& w, const VecDotKernel& kernel, const uint8_t* act, int64_t act_stride,
                         const float* token_scales, const int32_t* token_sums, int64_t n_tokens, float* y, int64_t y_stride,
                         int64_t row_begin, int64_t row_end) {
  const int64_t w_row_bytes = w.row_stride_bytes();
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
            kernel.dot2x4(w.n_cols, w_rows, w_row_bytes, act + t * act_stride, act_stride, out);
            for (int j = 0; j < 4; ++j) {
              y[(t + j) * y_stride + r] = out[j];
              y[(t + j) * y_stride + r + 1] = out[4 + j];
            }
          }
          for (; t < t1; ++t) {
            y[t * y_stride + r] = kernel.dot(w.n_cols, w_rows, act + t * act_stride);
            y[t * y_stride + r + 1] = kernel.dot(w.n_cols, w_rows + w_row_bytes, act + t * act_stride);
          }
        }
      }
      for (; r < r1; ++r) {
        const uint8_t* w_row = w.data + r * w_row_bytes;
        int64_t t = t0;
        if (kernel.dot4) {
          for (; t + 4 <= t1; t += 4) {
            float out[4];
            kernel.dot4(w.n_cols, w_row, act + t * act_stride, act_stride, out);
            for (int j = 0; j < 4; ++j) y[(t + j) * y_stride + r] = out[j];
          }
        }
        for (; t < t1; ++t) y[t * y_stride + r] = kernel.dot(w.n_cols, w_row, act + t * act_stride);
      }
      if (token_scales) scale_w8a8_outputs(w, token_scales, token_sums, t0, t1, r0, r1, y, y_stride);
    }
  }
}

// BF16 weights repacked for AMX-BF16 (interleaved_rows.h), every token
// count: the tiles read the converted bf16 rows as they lie, unless the
// step's last tile of 16 tokens is partial (the tiles read whole ones; a
// step of fewer tokens uses tiles of that many): then the rows are copied
// with zero rows after them. Runs of two groups of 16 rows go to the threads.
void bf16_tiles(ThreadPool& pool, const WeightMatrix* w, int64_t n_mats, const Activations& act, int64_t n_tokens, float* y,
                int64_t y_token_stride, int64_t y_mat_stride, MatmulScratch& scratch) {
  const WeightMatrix& first = w[0];
  const int64_t n_padded = n_tokens < k_amx_tile_tokens ? n_tokens : (n_tokens + k_amx_tile_tokens - 1) / k_amx_tile_tokens * k_amx_tile_tokens;
  const uint8_t* rows = act.data;
  int64_t stride = act.token_stride, mat_bytes = act.mat_stride;
  if (n_padded > n_tokens) {
    const int64_t row_bytes = 2 * first.n_cols;
    mat_bytes = n_padded * stride;
    if (scratch.tile_codes.size() < size_t(n_mats * mat_bytes)) scratch.tile_codes.resize(size_t(n_mats * mat_bytes));
    auto* padded = reinterpret_cast<uint8_t*>(scratch.tile_codes.data());
    for (int64_t m = 0; m < n_mats; ++m) {
      for (int64_t t = 0; t < n_padded; ++t) {
        uint8_t* row = padded + m * mat_bytes + t * stride;
        if (t < n_tokens) std::memcpy(row, act.data + m * act.mat_stride + t * act.token_stride, size_t(row_bytes));
        else std::memset(row, 0, size_t(row_bytes));
      }
    }
    rows = padded;
  }
  const Bf16TilesFn tiles = bf16_tiles_amx();
  const int64_t groups = first.n_rows / k_amx_tile_rows, items = (groups + 1) / 2;
  for_row_tiles(pool, n_mats * items, n_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t m = i / items, g0 = i % items * 2;
      tiles(first.n_cols, w[m].data, g0, std::min(groups, g0 + 2), rows + m * mat_bytes, stride, n_tokens, y + m * y_mat_stride,
            y_token_stride);
    }
  });
}

}  // namespace

void matmul(ThreadPool& pool, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
            MatmulScratch& scratch) {
  matmul_batched(pool, &w, 1, x, w.n_cols, 0, n_tokens, y, w.n_rows, 0, scratch);
}

void matmul_batched(ThreadPool& pool, const WeightMatrix* w, int64_t n_mats, const float* x, int64_t x_token_stride,
                    int64_t x_mat_stride, int64_t n_tokens, float* y, int64_t y_token_stride, int64_t y_mat_stride,
                    MatmulScratch& scratch) {
  const WeightMatrix& first = w[0];
  for (int64_t m = 1; m < n_mats; ++m) {
    DS_CHECK(w[m].type == first.type && w[m].n_rows == first.n_rows && w[m].n_cols == first.n_cols &&
                 w[m].repacked == first.repacked && w[m].input_scale == first.input_scale &&
                 (w[m].row_zero_points == nullptr) == (first.row_zero_points == nullptr),
             "matmul_batched: the matrices differ in type, shape or layout");
  }
  const VecDotKernel kernel = vec_dot_kernel(first.type);
  const bool needs_block_sums = first.repacked && interleaved_kernel_reads_block_sums(first.type);
  // The AMX tiles take the step's whole tiles of 16 tokens (from amx_min_tokens on); the interleaved kernel the rest.
  const InterleavedTilesFn amx_tiles = first.repacked && n_tokens >= amx_min_tokens(first.type) ? interleaved_tiles(first.type) : nullptr;
  const int64_t n_tiled = amx_tiles ? n_tokens / k_amx_tile_tokens * k_amx_tile_tokens : 0;
  // Steps of a few tokens or more take two groups at a time where a pair kernel runs.
  const InterleavedPairFn pair_kernel =
      first.repacked && n_tokens - n_tiled >= k_pair_min_tokens ? interleaved_pair_kernel(first.type) : nullptr;
  const bool biased = first.repacked && interleaved_activations_biased(first.type);
  const Activations act = convert_activations(pool, kernel.activation_type, x, x_token_stride, x_mat_stride, n_mats, n_tokens,
                                              first.n_cols, needs_block_sums, (amx_tiles || pair_kernel) && kernel.activation_type == DType::q8_0,
                                              first.input_scale,
                                              first.row_zero_points != nullptr, biased ? n_tiled : n_tokens, scratch);
  if (first.repacked && first.type == DType::bf16) {
    bf16_tiles(pool, w, n_mats, act, n_tokens, y, y_token_stride, y_mat_stride, scratch);
    return;
  }
  // F32, F16 and BF16 weights: their own tiles (float_rows.h), a thread's
  // run of 16-row tiles of a matrix by 30 tokens at a time (a multiple of both
  // kernels' three and six tokens); a run in one call, so that the AVX-512
  // prefill converts a tile of tokens once for all its rows.
  if (const FloatRowsFn float_rows = float_rows_kernel(first.type)) {
    constexpr int64_t k_float_token_tile = 30;
    const int64_t tiles = (first.n_rows + k_row_tile - 1) / k_row_tile;
    for_row_tiles(pool, n_mats * tiles, n_tokens, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin, next = 0; i < end; i = next) {
        const int64_t m = i / tiles;
        next = std::min(end, (m + 1) * tiles);
        const int64_t r0 = (i - m * tiles) * k_row_tile, r1 = std::min(first.n_rows, (next - m * tiles) * k_row_tile);
        for (int64_t t0 = 0; t0 < n_tokens; t0 += k_float_token_tile) {
          float_rows(w[m].data, w[m].row_stride_bytes(), first.n_cols, r0, r1, act.data + m * act.mat_stride + t0 * act.token_stride,
                     act.token_stride, std::min(k_float_token_tile, n_tokens - t0), y + m * y_mat_stride + t0 * y_token_stride,
                     y_token_stride);
        }
      }
    });
    return;
  }
  if (first.repacked) {
    // Each group of rows against every token (the AMX tiles: runs of
    // k_amx_run_rows; a pair kernel: two groups): the group's weights stay in
    // L1/L2 while the tokens pass.
    const int64_t n_blocks = first.n_cols / interleaved_block_elements(first.type), group_rows = interleaved_group_rows(first.type);
    const int64_t group_bytes = group_rows * first.row_stride_bytes(), groups = first.n_rows / group_rows;
    const InterleavedGroupFn group_kernel = interleaved_kernel(first.type);
    const int64_t groups_per_item = amx_tiles ? k_amx_run_rows / group_rows : pair_kernel ? 2 : 1;
    const int64_t items = (groups + groups_per_item - 1) / groups_per_item;
    const int8_t* tile_codes = n_tiled > 0 ? pack_tile_codes(pool, kernel.activation_type, amx_tile_depth(first.type), act, n_mats,
                                                             n_tiled, first.n_cols, scratch)
                                           : nullptr;
    const bool k_rows = kernel.activation_type == DType::q8_k;  // the K types' tiles read the Q8_K rows' scales and sums
    for_row_tiles(pool, n_mats * items, n_tokens, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t m = i / items, g0 = i % items * groups_per_item, g1 = std::min(groups, g0 + groups_per_item);
        const uint8_t* m_act = act.data + m * act.mat_stride;
        float* y_m = y + m * y_mat_stride;
        if (n_tiled > 0) {
          const TileActivations tiles{tile_codes + m * n_tiled * first.n_cols,
                                      act.block_scales ? act.block_scales + m * n_blocks * n_tokens : nullptr, n_tokens,
                                      k_rows ? m_act : nullptr, act.token_stride};
          amx_tiles(g1 - g0, n_blocks, w[m].data + g0 * group_bytes, tiles, n_tiled, y_m + g0 * group_rows, y_token_stride);
        }
        const int32_t* block_sums = act.block_sums ? act.block_sums + (m * n_tokens + n_tiled) * n_blocks : nullptr;
        for (int64_t g = g0; g < g1 && n_tiled < n_tokens;) {
          const int64_t together = pair_kernel && g + 1 < g1 ? 2 : 1;
          const uint8_t* groups_at = w[m].data + g * group_bytes;
          const uint8_t* g_act = m_act + n_tiled * act.token_stride;
          float* g_out = y_m + n_tiled * y_token_stride + g * group_rows;
          if (together == 2) {
            const PairActivations pair_act{g_act, act.token_stride, block_sums,
                                           act.block_scales ? act.block_scales + m * n_blocks * n_tokens + n_tiled : nullptr, n_tokens};
            pair_kernel(n_blocks, groups_at, group_bytes, pair_act, n_tokens - n_tiled, g_out, y_token_stride);
          } else {
            group_kernel(n_blocks, groups_at, g_act, act.token_stride, block_sums, n_tokens - n_tiled, g_out, y_token_stride);
          }
          g += together;
        }
        if (act.token_scales) {
          scale_w8a8_outputs(w[m], act.token_scales + m * n_tokens, act.token_sums ? act.token_sums + m * n_tokens : nullptr, 0,
                             n_tokens, g0 * group_rows, g1 * group_rows, y_m, y_token_stride);
        }
      }
    });
    return;
  }
  const int64_t tiles = (first.n_rows + k_row_tile - 1) / k_row_tile;
  for_row_tiles(pool, n_mats * tiles, n_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end;) {
      // A run of tiles within one matrix at a time.
      const int64_t m = i / tiles, tile_end = std::min(end, (m + 1) * tiles);
      rows_against_tokens(w[m], kernel, act.data + m * act.mat_stride, act.token_stride,
                          act.token_scales ? act.token_scales + m * n_tokens : nullptr,
                          act.token_sums ? act.token_sums + m * n_tokens : nullptr, n_tokens, y + m * y_mat_stride,
                          y_token_stride, (i - m * tiles) * k_row_tile, std::min(first.n_rows, (tile_end - m * tiles) * k_row_tile));
      i = tile_end;
    }
  });
}

namespace {

// W8A8: the per-token int8 row against each int8 weight row, summed in int64,
// scaled as the kernels scale.
void matmul_reference_i8(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  std::vector<int8_t> a(static_cast<size_t>(w.n_cols)), row_codes(static_cast<size_t>(w.n_cols));
  for (int64_t t = 0; t < n_tokens; ++t) {
    float a_scale = w.input_scale;
    if (a_scale > 0.0f) quantize_int8_row_static(x + t * w.n_cols, w.n_cols, a_scale, a.data());
    else a_scale = quantize_int8_row(x + t * w.n_cols, w.n_cols, a.data());
    int64_t a_sum = 0;
    for (int8_t q : a) a_sum += q;
    for (int64_t r = 0; r < w.n_rows; ++r) {
      const auto* row = reinterpret_cast<const int8_t*>(w.data + r * w.n_cols);
      if (w.repacked) {
        deinterleaved_row(w.type, w.n_cols, w.data, r, reinterpret_cast<uint8_t*>(row_codes.data()));
        row = row_codes.data();
      }
      int64_t sum = 0;
      for (int64_t k = 0; k < w.n_cols; ++k) sum += int64_t(row[k]) * a[size_t(k)];
      y[t * w.n_rows + r] = w8a8_output(float(sum), w.row_zero_points ? w.row_zero_points[r] : 0, int32_t(a_sum), a_scale,
                                        w.row_scales[r]);
    }
  }
}

}  // namespace

void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
  if (w.type == DType::i8) return matmul_reference_i8(w, x, n_tokens, y);
  const DType act_type = activation_type_for(w.type);
  std::vector<float> w_row(size_t(w.n_cols)), a_row(size_t(w.n_cols));
  std::vector<uint8_t> a_converted(size_t(row_bytes(act_type, w.n_cols)));
  std::vector<uint8_t> row_bytes_buffer(size_t(w.row_stride_bytes()));
  for (int64_t t = 0; t < n_tokens; ++t) {
    quantize_row(act_type, x + t * w.n_cols, a_converted.data(), w.n_cols);
    dequantize_row(act_type, a_converted.data(), a_row.data(), w.n_cols);
    for (int64_t r = 0; r < w.n_rows; ++r) {
      const uint8_t* row = w.data + r * w.row_stride_bytes();
      if (w.repacked) {
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
