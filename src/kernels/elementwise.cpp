#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu_features.h"

namespace ds {

void rms_norm(const float* x, const float* weight, float eps, int64_t n_rows, int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; ++r, x += n, y += n) {
    // Squares in f32, summed in f64, as llama.cpp does (its results are the reference).
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
    const float scale = 1.0f / std::sqrt(float(sum / double(n)) + eps);
    if (!weight) {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
    }
  }
}

void layer_norm(const float* x, const float* weight, const float* bias, float eps, int64_t n_rows, int64_t n, float* y) {
  for (int64_t r = 0; r < n_rows; ++r, x += n, y += n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += double(x[i]);
    const float mean = float(sum / double(n));
    double squares = 0.0;
    for (int64_t i = 0; i < n; ++i) squares += double((x[i] - mean) * (x[i] - mean));
    const float scale = 1.0f / std::sqrt(float(squares / double(n)) + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * scale * weight[i] + bias[i];
  }
}

void silu_mul_portable(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void silu_mul(float* gate, const float* up, int64_t n) {
  if (use_avx2_kernels()) return silu_mul_avx2(gate, up, n);
  silu_mul_portable(gate, up, n);
}

void swiglu(float* gate, float* up, int64_t n, float limit) {
  if (limit > 0.0f) {
    for (int64_t i = 0; i < n; ++i) {
      gate[i] = std::min(gate[i], limit);
      up[i] = std::clamp(up[i], -limit, limit);
    }
  }
  silu_mul(gate, up, n);
}

void softmax(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r, y += n) add_inplace(y, bias, n);
}

}  // namespace ds
