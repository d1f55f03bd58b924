// The checkpoint reader on DeepSeek-V4's stored forms, against naive decodes
// written here from the formats' definitions: an FP4 expert (e2m1 codes two
// to an int8, an e8m0 exponent per 32) read as ggml MXFP4 blocks decodes to
// exactly the source's values; an FP8 weight with e8m0 block scales (V4's
// STEM.scale) dequantizes to code times power of two; an int64 table reads as
// int32; an FP4 weight whose scales are missing is no FP4 weight.

#include "hub/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tensor/quantize.h"

namespace ds {
namespace {

// e2m1: sign, two exponent bits, one mantissa bit (OCP MX): 0, 0.5, 1, 1.5, 2, 3, 4, 6.
float e2m1(uint8_t code) {
  static const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (code & 8 ? -1.0f : 1.0f) * magnitude[code & 7];
}

struct Entry {
  std::string name, dtype, shape, bytes;
};

std::string write_checkpoint(const std::vector<Entry>& entries) {
  char dir[] = "/tmp/hf_checkpoint_test_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  std::ofstream(std::string(dir) + "/config.json") << R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})";
  std::string header = "{", data;
  for (const Entry& e : entries) {
    header += (header.size() > 1 ? ", \"" : "\"") + e.name + "\": {\"dtype\": \"" + e.dtype + "\", \"shape\": " + e.shape +
              ", \"data_offsets\": [" + std::to_string(data.size()) + ", " + std::to_string(data.size() + e.bytes.size()) + "]}";
    data += e.bytes;
  }
  header += "}";
  std::ofstream out(std::string(dir) + "/model.safetensors", std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
  return dir;
}

TEST(HfCheckpoint, DeepSeekV4StoredFormsReadExactly) {
  // FP4: 2 rows of 64 elements, codes from a pattern that reaches all 16; exponents 120..123.
  std::string packed, exponents;
  for (int i = 0; i < 2 * 32; ++i) packed += char(uint8_t((i * 7) % 16 | (((i * 5 + 3) % 16) << 4)));
  for (int i = 0; i < 2 * 2; ++i) exponents += char(uint8_t(120 + i));
  // FP8: 2x4 e4m3 codes (0x38 is 1.0, 0x40 is 2.0, 0xb8 is -1.0) under one e8m0 scale of 2^-3.
  const std::string fp8 = {'\x38', '\x40', '\xb8', '\x00', '\x38', '\x38', '\x40', '\x40'};
  const int64_t table[4] = {0, 3, int64_t(1) << 40, -1};
  const std::string dir = write_checkpoint({
      {"e.weight", "I8", "[2, 32]", packed},
      {"e.scale", "F8_E8M0", "[2, 2]", exponents},
      {"w.weight", "F8_E4M3", "[2, 4]", fp8},
      {"w.scale", "F8_E8M0", "[1, 1]", std::string(1, char(124))},
      {"t", "I64", "[2, 2]", std::string(reinterpret_cast<const char*>(table), sizeof table)},
      {"u.weight", "I8", "[2, 32]", packed},
  });
  auto checkpoint = HfCheckpoint::open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.message();
  const HfCheckpoint& c = *checkpoint.value();
  EXPECT_TRUE(c.is_scale("e.scale"));
  EXPECT_TRUE(c.is_scale("w.scale"));

  auto experts = c.rows("e.weight");
  ASSERT_TRUE(experts.ok()) << experts.message();
  ASSERT_EQ(experts.value().stored(), HfCheckpoint::Stored::fp4);
  ASSERT_EQ(experts.value().columns(), 64);
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<uint8_t> blocks(2 * 17);
    experts.value().mxfp4_row(r, blocks.data());
    std::vector<float> decoded(64);
    dequantize_row(DType::mxfp4, blocks.data(), decoded.data(), 64);
    for (int e = 0; e < 64; ++e) {
      const uint8_t byte = uint8_t(packed[size_t(r * 32 + e / 2)]);
      const float source = e2m1(uint8_t(e % 2 ? byte >> 4 : byte & 15)) * std::ldexp(1.0f, exponents[size_t(r * 2 + e / 32)] - 127);
      EXPECT_EQ(decoded[size_t(e)], source) << "row " << r << " element " << e;
    }
  }

  auto weight = c.rows("w.weight");
  ASSERT_TRUE(weight.ok()) << weight.message();
  EXPECT_EQ(weight.value().stored(), HfCheckpoint::Stored::fp8);
  std::vector<float> row(4);
  weight.value().row(0, row.data());
  EXPECT_EQ(row, (std::vector<float>{0.125f, 0.25f, -0.125f, 0.0f}));

  auto ids = c.rows("t");
  ASSERT_TRUE(ids.ok()) << ids.message();
  EXPECT_EQ(ids.value().stored(), HfCheckpoint::Stored::integer);
  std::vector<int32_t> got(2);
  ids.value().int32_row(0, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 3}));
  ids.value().int32_row(1, got.data());
  EXPECT_EQ(got, (std::vector<int32_t>{INT32_MAX, -1}));

  // Without its scales an int8 weight is integers, not FP4: the plan refuses it where FP4 belongs.
  auto unscaled = c.rows("u.weight");
  ASSERT_TRUE(unscaled.ok());
  EXPECT_EQ(unscaled.value().stored(), HfCheckpoint::Stored::integer);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ds
