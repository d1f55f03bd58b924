#pragma once
// Weight rows into the llama.cpp types, for `dsinfer quantize`. The 32-blocks
// round as ggml's reference quantizer does, so that the bytes are the ones
// llama.cpp's quantizer writes (Q8_0 with 1 / d and halves away from zero,
// unlike the activations' 127 / amax and halves to even in tensor/quantize).
// The K types (Q4_K, Q5_K, Q6_K): each sub-block's scale (and, for Q4_K/Q5_K, its offset) is fitted by least
// squares over a search of starting scales, then the sub-block scales are
// themselves quantized (6-bit for Q4_K/Q5_K, 8-bit for Q6_K) against the
// super-block's f16 scale, and the values are rounded against the scales as
// stored, so that what a reader dequantizes is what the fit chose. The layout
// is ggml's (tensor/quant_blocks.h); tensor/quantize.h dequantizes it.

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

// An asymmetric W8A8 weight row: x ~ scale * (q - zero) with q and zero in
// [-127, 127], the row's range [min(min, 0), max(max, 0)] spread over the 255
// codes (a row of one sign gets all of them, where a symmetric scale would
// leave half unused). Returns the scale (0 for a zero row).
float quantize_int8_row_asymmetric(const float* x, int64_t n, int8_t* q, int32_t* zero_point);

// Writes n elements of x (a multiple of the type's block) into y as `type`;
// false for a type no weight is written in.
bool quantize_weight_row(DType type, const float* x, void* y, int64_t n);

}  // namespace ds
