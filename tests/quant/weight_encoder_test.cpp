#include "quant/weight_encoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "base/fp16.h"
#include "support/random_tensors.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

// One sub-block's grid as stored: value(q) = step * q - zero for q in [lo, hi].
struct Grid {
  float step, zero;
  int lo, hi;
};

Grid grid_of(DType type, const uint8_t* block, int sub) {
  if (type == DType::q6_k) {
    const auto& b = *reinterpret_cast<const BlockQ6_K*>(block);
    return {fp16_to_fp32(b.d) * float(b.scales[sub]), 0.0f, -32, 31};
  }
  const uint16_t* d = reinterpret_cast<const uint16_t*>(block);  // d, dmin lead both Q4_K and Q5_K
  uint8_t sc, m;
  k_scale_min(sub, block + 4, &sc, &m);
  return {fp16_to_fp32(d[0]) * float(sc), fp16_to_fp32(d[1]) * float(m), 0, type == DType::q4_k ? 15 : 31};
}

// Rows the fits find hard: random, an all-zero super-block, a constant one,
// all positive (the offset must stay >= 0), one huge outlier.
std::vector<float> hard_rows(std::mt19937& rng) {
  std::vector<float> x = random_floats(rng, 256 * 6);
  for (int i = 256; i < 512; ++i) x[size_t(i)] = 0.0f;
  for (int i = 512; i < 768; ++i) x[size_t(i)] = 0.75f;
  for (int i = 768; i < 1024; ++i) x[size_t(i)] = std::fabs(x[size_t(i)]) + 1.0f;
  x[1100] = 40.0f;
  return x;
}

// x encoded as `type` and decoded again; the encoded bytes in `bytes`.
std::vector<float> round_trip(DType type, const std::vector<float>& x, std::vector<uint8_t>& bytes) {
  const int64_t n = int64_t(x.size());
  bytes.assign(size_t(row_bytes(type, n)), 0);
  EXPECT_TRUE(quantize_weight_row(type, x.data(), bytes.data(), n));
  std::vector<float> y(x.size());
  dequantize_row(type, bytes.data(), y.data(), n);
  return y;
}

// Every value comes back as its nearest point of its sub-block's grid as
// stored: what the encoder promises once the scales are chosen.
TEST(WeightEncoder, KTypesRoundToTheNearestStoredCode) {
  std::mt19937 rng(3);
  const std::vector<float> x = hard_rows(rng);
  const int64_t n = int64_t(x.size());
  for (DType type : {DType::q4_k, DType::q5_k, DType::q6_k}) {
    std::vector<uint8_t> bytes;
    const std::vector<float> y = round_trip(type, x, bytes);
    const int sub_size = type == DType::q6_k ? 16 : 32;
    const int64_t block_bytes = dtype_traits(type).block_bytes;
    for (int64_t i = 0; i < n; ++i) {
      const Grid g = grid_of(type, bytes.data() + (i / 256) * block_bytes, int(i % 256) / sub_size);
      float best = INFINITY;
      for (int q = g.lo; q <= g.hi; ++q) best = std::min(best, std::fabs(x[size_t(i)] - (g.step * float(q) - g.zero)));
      // The dequantizer's own float rounding of step * q - zero: a few ulp of the value.
      EXPECT_LE(std::fabs(x[size_t(i)] - y[size_t(i)]), best + 4e-7f * (std::fabs(y[size_t(i)]) + g.zero))
          << dtype_name(type) << " element " << i;
    }
  }
}

// The fitted scales beat the grid a plain min-max fit would take: the squared
// error of random weights is below that grid's uniform rounding error.
TEST(WeightEncoder, KTypesBeatAPlainMinMaxFit) {
  std::mt19937 rng(4);
  const std::vector<float> x = random_floats(rng, 256 * 8);
  const int64_t n = int64_t(x.size());
  for (DType type : {DType::q4_k, DType::q5_k, DType::q6_k}) {
    std::vector<uint8_t> bytes;
    const std::vector<float> y = round_trip(type, x, bytes);
    const int sub = type == DType::q6_k ? 16 : 32, levels = type == DType::q4_k ? 15 : type == DType::q5_k ? 31 : 63;
    double err = 0, min_max = 0;
    for (int64_t s = 0; s < n; s += sub) {
      float lo = 0, hi = 0;
      for (int i = 0; i < sub; ++i) lo = std::min(lo, x[size_t(s + i)]), hi = std::max(hi, x[size_t(s + i)]);
      if (type == DType::q6_k) hi = std::max(hi, -lo), lo = -hi;
      const double step = (hi - lo) / levels;
      min_max += sub * step * step / 12;  // uniform rounding error of a min-max grid
      for (int i = 0; i < sub; ++i) err += std::pow(double(x[size_t(s + i)]) - y[size_t(s + i)], 2);
    }
    EXPECT_LT(err, min_max) << dtype_name(type);
  }
}

// Q8_0 weights: ggml's reference rounding (1 / d, halves away from zero).
TEST(WeightEncoder, Q8_0RoundsAsGgmlsReference) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1: x.5 rounds away from zero
  x[1] = 2.5f;
  x[2] = -2.5f;
  BlockQ8_0 b;
  ASSERT_TRUE(quantize_weight_row(DType::q8_0, x.data(), &b, 32));
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

// Asymmetric W8A8 rows: a row of one sign spreads [0, max] over all 255 codes,
// so every value comes back within a step of max / 254 (half for the rounding,
// half for the zero point's); a constant row comes back as itself.
TEST(WeightEncoder, AsymmetricInt8RowsSpreadTheRangeOverEveryCode) {
  std::mt19937 rng(6);
  std::vector<float> x = random_floats(rng, 300);
  for (float& v : x) v = 3.0f + std::fabs(v);  // all positive: a symmetric scale would waste half its codes
  std::vector<int8_t> q(x.size());
  int32_t zero = 0;
  const float scale = quantize_int8_row_asymmetric(x.data(), int64_t(x.size()), q.data(), &zero);
  const auto hi = std::max_element(x.begin(), x.end());
  EXPECT_NEAR(scale, *hi / 254.0f, 1e-7f);
  EXPECT_EQ(zero, -127);
  EXPECT_GE(zero, -127);
  EXPECT_LE(zero, 127);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_GE(q[i], -127);
    // Half a step, and the rounding of the zero point (another half step at most: its range edge).
    EXPECT_LE(std::fabs(scale * float(q[i] - zero) - x[i]), scale * 1.0001f) << i;
  }
  std::vector<float> constant(40, -0.75f);
  std::vector<int8_t> cq(40);
  const float cs = quantize_int8_row_asymmetric(constant.data(), 40, cq.data(), &zero);
  for (int8_t v : cq) EXPECT_NEAR(cs * float(v - zero), -0.75f, 1e-6f);  // the range's end is a code
  std::vector<float> zeros(40, 0.0f);
  EXPECT_EQ(quantize_int8_row_asymmetric(zeros.data(), 40, cq.data(), &zero), 0.0f);
  EXPECT_EQ(zero, 0);
}

}  // namespace
}  // namespace ds
