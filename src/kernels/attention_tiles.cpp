#include "kernels/attention_tiles.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu_features.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

void scores_portable(int64_t dim, const float* q, int64_t n_q, const float* k, int64_t n_k, float scale, float* scores,
                     int64_t scores_stride) {
  for (int64_t i = 0; i < n_q; ++i) {
    for (int64_t j = 0; j < n_k; ++j) {
      float sum = 0.0f;
      for (int64_t d = 0; d < dim; ++d) sum += q[i * dim + d] * k[j * dim + d];
      scores[i * scores_stride + j] = sum * scale;
    }
  }
}

void weighted_sum_portable(int64_t dim, const float* p, int64_t p_stride, int64_t n_q, const float* v, int64_t n_v,
                           float* out) {
  for (int64_t i = 0; i < n_q; ++i) {
    for (int64_t j = 0; j < n_v; ++j) {
      const float weight = p[i * p_stride + j];
      for (int64_t d = 0; d < dim; ++d) out[i * dim + d] += weight * v[j * dim + d];
    }
  }
}

void to_f32_portable(DType type, const void* x, float* y, int64_t n) { dequantize_row(type, x, y, n); }

float online_softmax_portable(float* x, int64_t n, float* max, float* sum) {
  if (n == 0) return 1.0f;
  float new_max = *max;
  for (int64_t i = 0; i < n; ++i) new_max = std::max(new_max, x[i]);
  const float correction = *max == -INFINITY ? 0.0f : std::exp(*max - new_max);
  float added = 0.0f;
  for (int64_t i = 0; i < n; ++i) added += (x[i] = std::exp(x[i] - new_max));
  *sum = *sum * correction + added;
  *max = new_max;
  return correction;
}

}  // namespace

void round_to_cache_portable(DType type, const float* x, float* y, int64_t n) {
  constexpr int64_t k_chunk = 32;  // one q8_0 block
  uint8_t typed[k_chunk * sizeof(float)];
  for (int64_t i = 0; i < n; i += k_chunk) {
    const int64_t m = std::min(k_chunk, n - i);
    quantize_row(type, x + i, typed, m);
    dequantize_row(type, typed, y + i, m);
  }
}

AttentionTileKernels attention_tile_kernels_portable() {
  return {scores_portable, weighted_sum_portable, to_f32_portable, round_to_cache_portable, online_softmax_portable};
}

const AttentionTileKernels& attention_tile_kernels() {
  static const AttentionTileKernels kernels = use_vnni_kernels()   ? attention_tile_kernels_avx512()
                                              : use_avx2_kernels() ? attention_tile_kernels_avx2()
                                                                   : attention_tile_kernels_portable();
  return kernels;
}

}  // namespace ds
