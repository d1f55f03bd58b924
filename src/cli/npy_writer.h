#pragma once
// Writes a 2-D float32 array as a NumPy .npy file (format version 1.0).

#include <cstdint>
#include <string>

#include "base/status.h"

namespace ds {

Status write_npy(const std::string& path, const float* data, int64_t n_rows, int64_t n_cols);

}  // namespace ds
