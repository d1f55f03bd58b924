#pragma once
// Weights into llama.cpp's K types (Q4_K, Q5_K, Q6_K), for `dsinfer quantize`.
// Each sub-block's scale (and, for Q4_K/Q5_K, its offset) is fitted by least
// squares over a search of starting scales, then the sub-block scales are
// themselves quantized (6-bit for Q4_K/Q5_K, 8-bit for Q6_K) against the
// super-block's f16 scale, and the values are rounded against the scales as
// stored, so that what a reader dequantizes is what the fit chose. The layout
// is ggml's (tensor/quant_blocks.h); tensor/quantize.h dequantizes it.

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

// Writes n elements of x (a multiple of 256) into y as `type`; false for a
// type other than Q4_K, Q5_K, Q6_K.
bool quantize_k_row(DType type, const float* x, void* y, int64_t n);

}  // namespace ds
