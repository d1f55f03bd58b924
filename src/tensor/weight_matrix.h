#pragma once
// The weight matrix every backend's ops take (device/backend.h), apart from
// any backend's kernels.

#include <cstdint>

#include "tensor/dtype.h"

namespace ds {

// A weight matrix: n_rows rows of n_cols elements in `type`, one row after
// another as in the file, or `repacked`: in the layout of the backend that
// stored it (Backend::repacks and store_matrix), which only that backend
// reads (the CPU's: rows interleaved in groups of eight,
// kernels/interleaved_rows.h). W8A8
// matrices are I8 rows with one f32 scale per row: y = scale[r] * a_scale *
// the int32 sum of products against the token's int8 activations (per-token
// scale a_scale = max|x| / 127, or the calibrated input_scale, clipping); with
// zero points z, the sum is taken over q - z, as sum(q a) - z sum(a).
struct WeightMatrix {
  DType type = DType::f32;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  const uint8_t* data = nullptr;
  bool repacked = false;
  const float* row_scales = nullptr;  // I8 only: [n_rows]
  // I8 only, asymmetric rows: w = scale * (q - zero); null for symmetric ones.
  const int32_t* row_zero_points = nullptr;
  float input_scale = 0.0f;           // I8 only: a static activation scale from calibration; 0: per token
  int64_t row_stride_bytes() const { return row_bytes(type, n_cols); }
};

}  // namespace ds
