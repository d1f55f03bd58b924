#pragma once
// Row-wise and element-wise ops of the decoder. Plain loops, but for SiLU,
// whose exponentials in the FFN's width of every token are worth vectorising
// (elementwise_avx2.cpp: an eighth of the scalar loop's time).

#include <cstdint>

namespace ds {

// y[t] = x[t] / rms(x[t]) * weight (weight null: 1), rows of n; the mean square is summed in double.
void rms_norm(const float* x, const float* weight, float eps, int64_t n_rows, int64_t n, float* y);

// y[t] = (x[t] - mean) / sqrt(variance + eps) * weight + bias, rows of n (a
// LayerNorm: DeepSeek-V3.2's indexer keys); mean and variance summed in double.
void layer_norm(const float* x, const float* weight, const float* bias, float eps, int64_t n_rows, int64_t n, float* y);

// gate[i] = silu(gate[i]) * up[i] over n elements; within 2e-6 relative of
// the formula (tested), each element's bits whatever range it is part of.
void silu_mul(float* gate, const float* up, int64_t n);
// The loops silu_mul chooses between: portable C++, and AVX2 + FMA (only
// where the CPU has them).
void silu_mul_portable(float* gate, const float* up, int64_t n);
void silu_mul_avx2(float* gate, const float* up, int64_t n);
// silu_mul with DeepSeek-V4's clamp where limit > 0: gate at most limit, up
// within [-limit, limit], both clamped in place first.
void swiglu(float* gate, float* up, int64_t n, float limit);

// In place softmax over n values.
void softmax(float* x, int64_t n);

// y[i] += x[i].
void add_inplace(float* y, const float* x, int64_t n);

// y[t][i] += bias[i] for n_rows rows of n.
void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n);

}  // namespace ds
