#pragma once
// Activations converted to the kernels' type (the integer kernels' Q8_0
// blocks, F16, BF16), once per matrix multiply. The fast path gives bit for
// bit what the reference quantizer (tensor/quantize) gives, so the kernels'
// results do not depend on the ISA.

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

// Any activation type; Q8_0, Q8_K, F16 and BF16 take the fastest path this CPU runs.
void quantize_activations(DType type, const float* x, void* out, int64_t n);

// W8A8's per-token rows: tensor/quantize's quantize_int8_row, on the fastest path.
// static_scale > 0: quantize_int8_row_static against it (and return it).
float quantize_int8_activations(const float* x, int8_t* out, int64_t n, float static_scale = 0.0f);

void quantize_q8_0_avx2(const float* x, void* out, int64_t n);
float quantize_int8_row_avx2(const float* x, int8_t* out, int64_t n);
void quantize_int8_row_static_avx2(const float* x, int8_t* out, int64_t n, float scale);
void quantize_q8_k_avx2(const float* x, void* out, int64_t n);
void convert_f16_avx2(const float* x, void* out, int64_t n);
void convert_bf16_avx2(const float* x, void* out, int64_t n);

}  // namespace ds
