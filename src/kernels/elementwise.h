#pragma once
// Row-wise and element-wise ops of the decoder. Plain loops: they are a small
// share of a forward pass next to the matrix multiplies.

#include <cstdint>

namespace ds {

// y[t] = x[t] / rms(x[t]) * weight, rows of n; the mean square is summed in double.
void rms_norm(const float* x, const float* weight, float eps, int64_t n_rows, int64_t n, float* y);

// gate[i] = silu(gate[i]) * up[i] over n elements.
void silu_mul(float* gate, const float* up, int64_t n);

// In place softmax over n values.
void softmax(float* x, int64_t n);

// y[i] += x[i].
void add_inplace(float* y, const float* x, int64_t n);

// y[t][i] += bias[i] for n_rows rows of n.
void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n);

}  // namespace ds
