#pragma once
// Reference (plain, obviously correct) conversions between f32 and every
// supported type. Kernels are tested against these.

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

// y[0..n) = the n elements at x, whose type is `type`; n is a multiple of the block size.
void dequantize_row(DType type, const void* x, float* y, int64_t n);

// Writes n elements of x into y in `type`. Supported for the activation types
// the matmul kernels use (f32, f16, bf16, q8_0, q8_1, q8_k) and for q4_0,
// q4_1, q5_0, q5_1 (test data). Returns false for any other type.
bool quantize_row(DType type, const float* x, void* y, int64_t n);

// x[0..n) ~ scale * q with q in [-127, 127], scale = max|x| / 127 (0 for a
// zero row): W8A8's per-output-channel weights and per-token activations.
// Rounds x * (127 / max|x|) to nearest, as the Q8 blocks do. Returns the scale.
float quantize_int8_row(const float* x, int64_t n, int8_t* q);
// The same against a given scale (a calibrated static one): q = x / scale
// rounded, clamped to [-127, 127]; computed as x * (1 / scale).
void quantize_int8_row_static(const float* x, int64_t n, float scale, int8_t* q);

}  // namespace ds
