#include "support/random_tensors.h"

#include "base/fp16.h"
#include "base/status.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace ds {

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<uint8_t> random_weights(std::mt19937& rng, DType type, int64_t n_rows, int64_t n_cols) {
  const int64_t bytes_per_row = row_bytes(type, n_cols);
  std::vector<uint8_t> data(size_t(bytes_per_row * n_rows));
  const std::vector<float> values = random_floats(rng, n_rows * n_cols);
  if (quantize_row(type, values.data(), data.data(), 0)) {
    for (int64_t r = 0; r < n_rows; ++r) quantize_row(type, values.data() + r * n_cols, data.data() + r * bytes_per_row, n_cols);
    return data;
  }
  if (type == DType::i8) {  // W8A8 weights: any byte a file may hold (the quantizer writes -127..127; -128 too)
    std::uniform_int_distribution<int> code(-128, 127);
    for (uint8_t& b : data) b = uint8_t(int8_t(code(rng)));
    return data;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : data) b = uint8_t(byte(rng));
  const int64_t block_bytes = dtype_traits(type).block_bytes;
  std::uniform_real_distribution<float> small(0.001f, 0.02f);
  for (size_t off = 0; off < data.size(); off += size_t(block_bytes)) {
    uint8_t* block = data.data() + off;
    const uint16_t d = fp32_to_fp16(small(rng)), dmin = fp32_to_fp16(small(rng));
    switch (type) {
      case DType::q4_k: reinterpret_cast<BlockQ4_K*>(block)->d = d; reinterpret_cast<BlockQ4_K*>(block)->dmin = dmin; break;
      case DType::q5_k: reinterpret_cast<BlockQ5_K*>(block)->d = d; reinterpret_cast<BlockQ5_K*>(block)->dmin = dmin; break;
      case DType::q6_k: reinterpret_cast<BlockQ6_K*>(block)->d = d; break;
      default: DS_CHECK(false, std::string("no random blocks for ") + dtype_name(type));
    }
  }
  return data;
}

}  // namespace ds
