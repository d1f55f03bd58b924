#include "base/memory_size.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

TEST(MemorySize, BytesSuffixesAndFractions) {
  EXPECT_EQ(parse_memory_size("1048576").value(), 1048576);
  EXPECT_EQ(parse_memory_size("512M").value(), 512LL << 20);
  EXPECT_EQ(parse_memory_size("4G").value(), 4LL << 30);
  EXPECT_EQ(parse_memory_size("1.5GiB").value(), 3LL << 29);
  EXPECT_EQ(parse_memory_size("2kb").value(), 2048);
  const int64_t available = available_memory_bytes();
  ASSERT_GT(available, 0);
  const int64_t quarter = parse_memory_size("0.25").value();
  EXPECT_GT(quarter, available / 5);  // MemAvailable moves a little between the two reads
  EXPECT_LT(quarter, available / 3);
}

TEST(MemorySize, NonsenseIsAnErrorNamingTheInput) {
  for (const char* bad : {"", "abc", "-1G", "0", "4X", "4GG", "nan", "1e30"}) {
    auto parsed = parse_memory_size(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.message().find(std::string("'") + bad + "'"), std::string::npos) << parsed.message();
  }
}

}  // namespace
}  // namespace ds
