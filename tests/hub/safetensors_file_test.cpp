// The safetensors reader on files written here: tensors found with their
// bytes; a header past the file, a tensor's bytes past the data, a size that
// contradicts dtype and shape, an unknown dtype and a header that is not JSON
// each refused naming the tensor. FP8 e4m3 bytes decode exactly (the OCP
// "fn" format's landmarks: subnormals, 1, the largest 448, NaN).

#include "hub/safetensors_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "hub/hf_checkpoint.h"

namespace ds {
namespace {

std::string write_file(const std::string& header, const std::string& data, int64_t claimed_header = -1) {
  char name[] = "/tmp/safetensors_test_XXXXXX";
  const int fd = mkstemp(name);
  close(fd);
  std::ofstream out(name, std::ios::binary);
  const uint64_t n = claimed_header >= 0 ? uint64_t(claimed_header) : header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
  return name;
}

Result<std::unique_ptr<SafetensorsFile>> open_written(const std::string& header, const std::string& data, int64_t claimed = -1) {
  const std::string path = write_file(header, data, claimed);
  auto file = SafetensorsFile::open(path);
  unlink(path.c_str());
  return file;
}

TEST(SafetensorsFile, TensorsAreFoundWithTheirBytes) {
  const float values[3] = {1.5f, -2.0f, 0.25f};
  const std::string data(reinterpret_cast<const char*>(values), sizeof values);
  auto file = open_written(R"({"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}})", data);
  ASSERT_TRUE(file.ok()) << file.message();
  const SafetensorsTensor* w = file.value()->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, std::vector<int64_t>{3});
  EXPECT_EQ(std::memcmp(file.value()->data(*w), values, 12), 0);
}

TEST(SafetensorsFile, BadFilesAreRefusedNamingTheTensor) {
  const std::string data(16, '\0');
  struct Case {
    std::string header;
    int64_t claimed;
    const char* expected;
  } cases[] = {
      {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 1 << 20, "truncated"},
      {R"({"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}})", -1, "'w'"},
      {R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", -1, "16 bytes for 3 elements"},
      {R"({"w": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}})", -1, "dtype Q4"},
      {R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", -1, "'w'"},
      {R"({"w": {"dtype": "F32", "shape": [4]}})", -1, "data_offsets"},
      {R"({"w": )", -1, "not a JSON object"},
  };
  for (const Case& c : cases) {
    auto file = open_written(c.header, data, c.claimed);
    ASSERT_FALSE(file.ok()) << c.header;
    EXPECT_NE(file.message().find(c.expected), std::string::npos) << c.header << ": " << file.message();
  }
}

TEST(Fp8E4m3, DecodesExactly) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x39), 1.125f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);  // the largest: no infinities in e4m3fn
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  for (int x = 0; x < 0x7e; ++x) EXPECT_LT(fp8_e4m3_to_f32(uint8_t(x)), fp8_e4m3_to_f32(uint8_t(x + 1))) << x;  // monotonic
}

}  // namespace
}  // namespace ds
