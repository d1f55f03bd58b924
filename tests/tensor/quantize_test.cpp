// Reference quantization round trips: every 8-bit and 4/5-bit quantizer keeps
// each value within half a quantization step of the original.

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "base/fp16.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace ds {
namespace {

TEST(Fp16, ConversionsRoundTripAndRoundToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(fp32_to_fp16(f), uint16_t(h)) << h;
  }
  EXPECT_EQ(fp32_to_fp16(1.0f + 1.0f / 2048.0f), fp32_to_fp16(1.0f));  // tie rounds to even
  EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(3.140625f)), 3.140625f);
}

// (type, number of quantization steps across [-amax, amax], allowed error in steps).
// The *_0 types put the block's extreme at -8 (or -16) steps, so values of the
// other sign clamp at +7 (+15) and may lose up to one whole step.
class QuantizeTest : public ::testing::TestWithParam<std::tuple<DType, float, float>> {};

TEST_P(QuantizeTest, RoundTripWithinHalfAStep) {
  const auto [type, levels, allowed_steps] = GetParam();
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int64_t n = 512;
  std::vector<float> x(n), y(n);
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> q(size_t(row_bytes(type, n)));
  ASSERT_TRUE(quantize_row(type, x.data(), q.data(), n));
  dequantize_row(type, q.data(), y.data(), n);
  const int64_t block = dtype_traits(type).block_elements;
  for (int64_t b = 0; b < n; b += block) {
    float lo = x[size_t(b)], hi = x[size_t(b)];
    for (int64_t i = b; i < b + block; ++i) { lo = std::min(lo, x[size_t(i)]); hi = std::max(hi, x[size_t(i)]); }
    const float step = std::max(std::fabs(lo), std::fabs(hi)) * 2.0f / levels;
    for (int64_t i = b; i < b + block; ++i) EXPECT_NEAR(y[size_t(i)], x[size_t(i)], step * allowed_steps + 1e-3f) << dtype_name(type) << " " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizeTest,
                         ::testing::Values(std::tuple{DType::q8_0, 254.0f, 0.51f}, std::tuple{DType::q8_1, 254.0f, 0.51f},
                                           std::tuple{DType::q8_k, 254.0f, 0.51f}, std::tuple{DType::q4_0, 15.0f, 1.01f},
                                           std::tuple{DType::q4_1, 15.0f, 0.51f}, std::tuple{DType::q5_0, 31.0f, 1.01f},
                                           std::tuple{DType::q5_1, 31.0f, 0.51f}, std::tuple{DType::f16, 2048.0f, 0.51f},
                                           std::tuple{DType::bf16, 256.0f, 0.51f}),
                         [](const auto& info) { return std::string(dtype_name(std::get<0>(info.param))); });

TEST(KQuants, AllScalesAtOnceEqualOneByOne) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 1000; ++trial) {
    uint8_t q[k_scale_bytes_k], scales[8], mins[8];
    for (uint8_t& b : q) b = uint8_t(byte(rng));
    k_scales_mins(q, scales, mins);
    for (int j = 0; j < 8; ++j) {
      uint8_t scale, min;
      k_scale_min(j, q, &scale, &min);
      ASSERT_EQ(scales[j], scale) << "sub-block " << j;
      ASSERT_EQ(mins[j], min) << "sub-block " << j;
    }
  }
}

TEST(DType, UnknownIdsHaveNoTraitsAndNamesAreStable) {
  EXPECT_FALSE(dtype_traits(4u).has_value());
  EXPECT_FALSE(dtype_traits(1000u).has_value());
  EXPECT_STREQ(dtype_name(DType::q4_k), "Q4_K");
  EXPECT_EQ(row_bytes(DType::q6_k, 512), 420);
  EXPECT_FALSE(is_compute_supported(DType::iq2_xxs));
}

}  // namespace
}  // namespace ds
