// The GGUF reader on well-formed, truncated, bit-flipped and crafted files:
// bad files must give an error naming the problem, never a crash (this test
// also runs under AddressSanitizer, see scripts/test.sh).

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace ds {
namespace {

std::vector<uint8_t> small_file() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 2);
  w.add_float32("llama.rope.freq_base", 10000.0f);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.add_float32_array("tokenizer.ggml.scores", {0.5f, -1.0f, 2.0f});
  const std::vector<float> data(64, 1.5f);
  w.add_tensor("weight", DType::f32, {16, 4}, data.data(), data.size() * 4);
  w.add_tensor("bias", DType::f32, {16}, data.data(), 64);
  return w.finish();
}

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

std::vector<uint8_t> header(uint64_t n_tensors, uint64_t n_kv) {
  std::vector<uint8_t> out;
  put<uint32_t>(out, 0x46554747);
  put<uint32_t>(out, 3);
  put<uint64_t>(out, n_tensors);
  put<uint64_t>(out, n_kv);
  return out;
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  auto file = GgufFile::parse(bytes.data(), bytes.size());
  return file.ok() ? std::string() : file.message();
}

TEST(GgufFile, ReadsWhatTheWriterWrote) {
  const std::vector<uint8_t> bytes = small_file();
  auto file = GgufFile::parse(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok()) << file.message();
  const GgufFile& f = *file.value();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f.get_uint("llama.block_count").value(), 2u);
  EXPECT_FLOAT_EQ(float(f.get_float("llama.rope.freq_base").value()), 10000.0f);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token").value());
  ASSERT_EQ(f.get_array("tokenizer.ggml.tokens").value()->size(), 3u);
  EXPECT_EQ(*f.get_array("tokenizer.ggml.tokens").value()->string(2), "c");
  EXPECT_EQ(*f.get_array("tokenizer.ggml.scores").value()->real(1), -1.0);
  EXPECT_FALSE(f.get_array("tokenizer.ggml.scores").value()->string(0).has_value());
  const GgufTensorInfo* weight = f.find_tensor("weight");
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->ne[0], 16);
  EXPECT_EQ(weight->ne[1], 4);
  EXPECT_EQ(weight->n_bytes, 256u);
  float first;
  std::memcpy(&first, f.tensor_data(*weight), 4);
  EXPECT_EQ(first, 1.5f);
  EXPECT_EQ(f.tensor_data(*weight) - bytes.data(), int64_t(f.data_offset()));
}

TEST(GgufFile, TypedGettersNameTheKey) {
  const std::vector<uint8_t> bytes = small_file();
  auto file = GgufFile::parse(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok());
  EXPECT_NE(file.value()->get_uint("general.architecture").message().find("general.architecture"), std::string::npos);
  EXPECT_NE(file.value()->get_string("missing.key").message().find("missing.key"), std::string::npos);
  EXPECT_EQ(file.value()->get_uint_or("missing.key", 7).value(), 7u);
}

TEST(GgufFile, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes = small_file();
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + int64_t(size));
    // Tensor data is at the end; cutting into the padding after the last tensor is harmless.
    auto file = GgufFile::parse(cut.data(), cut.size());
    if (size < bytes.size() - 32) {
      EXPECT_FALSE(file.ok()) << "truncated to " << size;
    }
    if (!file.ok()) {
      EXPECT_FALSE(file.message().empty());
    }
  }
}

TEST(GgufFile, BitFlipsNeverCrash) {
  const std::vector<uint8_t> bytes = small_file();
  std::mt19937 rng(123);
  std::uniform_int_distribution<size_t> where(0, bytes.size() - 1);
  std::uniform_int_distribution<int> bit(0, 7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> flipped = bytes;
    for (int k = 0; k < 1 + trial % 4; ++k) flipped[where(rng)] ^= uint8_t(1u << bit(rng));
    auto file = GgufFile::parse(flipped.data(), flipped.size());
    if (file.ok()) {  // whatever parsed must be in bounds
      for (const GgufTensorInfo& t : file.value()->tensors()) {
        EXPECT_LE(file.value()->data_offset() + t.offset + t.n_bytes, flipped.size());
      }
    }
  }
}

TEST(GgufFile, CraftedCountsAndSizesAreRejectedBeforeAllocation) {
  EXPECT_NE(parse_error(header(UINT64_MAX, 0)).find("tensor count"), std::string::npos);
  EXPECT_NE(parse_error(header(0, UINT64_MAX / 2)).find("metadata count"), std::string::npos);

  auto kv_header = header(0, 1);
  std::vector<uint8_t> huge_string = kv_header;
  put<uint64_t>(huge_string, UINT64_MAX - 3);  // key length
  huge_string.resize(huge_string.size() + 64, 0);
  EXPECT_NE(parse_error(huge_string).find("past the end"), std::string::npos);

  std::vector<uint8_t> huge_array = kv_header;
  put_string(huge_array, "k");
  put<uint32_t>(huge_array, 9);   // array
  put<uint32_t>(huge_array, 10);  // of u64
  put<uint64_t>(huge_array, uint64_t(1) << 60);
  EXPECT_NE(parse_error(huge_array).find("elements"), std::string::npos);

  std::vector<uint8_t> deep = kv_header;
  put_string(deep, "nested");
  put<uint32_t>(deep, 9);
  for (int i = 0; i < 10; ++i) {
    put<uint32_t>(deep, 9);
    put<uint64_t>(deep, 1);
  }
  EXPECT_NE(parse_error(deep).find("array of arrays"), std::string::npos);  // refused at the first level

  std::vector<uint8_t> bad_type = kv_header;
  put_string(bad_type, "k");
  put<uint32_t>(bad_type, 77);
  EXPECT_NE(parse_error(bad_type).find("unknown type"), std::string::npos);
}

std::vector<uint8_t> one_tensor(uint32_t n_dims, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
  std::vector<uint8_t> out = header(1, 0);
  put_string(out, "t");
  put<uint32_t>(out, n_dims);
  for (uint64_t d : dims) put<uint64_t>(out, d);
  put<uint32_t>(out, type);
  put<uint64_t>(out, offset);
  out.resize((out.size() + 31) / 32 * 32 + 64, 0);
  return out;
}

TEST(GgufFile, CraftedTensorInfosAreRejected) {
  EXPECT_NE(parse_error(one_tensor(5, {1, 1, 1, 1, 1}, 0, 0)).find("dimensions"), std::string::npos);
  EXPECT_NE(parse_error(one_tensor(2, {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0)).find("overflows"), std::string::npos);
  EXPECT_NE(parse_error(one_tensor(1, {0}, 0, 0)).find("zero"), std::string::npos);
  EXPECT_NE(parse_error(one_tensor(1, {16}, 0, 1 << 20)).find("past the end"), std::string::npos);
  EXPECT_NE(parse_error(one_tensor(1, {16}, 0, 3)).find("aligned"), std::string::npos);
  EXPECT_NE(parse_error(one_tensor(1, {16}, 99, 0)).find("unknown type"), std::string::npos);
  EXPECT_NE(parse_error(one_tensor(1, {33}, 8, 0)).find("block size"), std::string::npos);
  EXPECT_TRUE(parse_error(one_tensor(1, {16}, 0, 0)).empty());
}

TEST(GgufFile, RejectsOtherFormats) {
  const std::vector<uint8_t> not_gguf(64, 'x');
  EXPECT_NE(parse_error(not_gguf).find("magic"), std::string::npos);
  std::vector<uint8_t> v1 = header(0, 0);
  v1[4] = 1;
  EXPECT_NE(parse_error(v1).find("version"), std::string::npos);
}

TEST(GgufFile, OpenReportsMissingFile) {
  auto file = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.message().find("/nonexistent/model.gguf"), std::string::npos);
}

}  // namespace
}  // namespace ds
