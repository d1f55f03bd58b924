#pragma once
// Random test operands: f32 values and weight rows in any supported type.

#include <cstdint>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace ds {

// n values from N(0, scale²).
std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.0f);

// Weight bytes for a [n_rows, n_cols] matrix in the row layout: quantized from
// random values where a quantizer exists, random blocks with small scales for
// the K types, random codes in [-127, 127] for I8 (W8A8, whose row scales the
// caller gives).
std::vector<uint8_t> random_weights(std::mt19937& rng, DType type, int64_t n_rows, int64_t n_cols);

}  // namespace ds
